"""``notebooks/quickstart.ipynb``: saved with its outputs, and still running headless.

The notebook is executed with nbclient on a kernel that runs this interpreter (a kernelspec
written to a temporary ``JUPYTER_PATH``, so a user-level ``python3`` kernel pointing elsewhere
cannot interfere). The notebook starts its own pulsar-lite broker and Spark session. Its printed
results are checked against counts computed here from the way it generates its events, both in
the fresh run and in the outputs saved in the repository; its events per partition follow Java's
key routing (predicted with the connector's ``partition_for_key``, which ``test_java_interop``
holds to the partitions Apache Pulsar's Java producer picks).
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from pulsar_spark.protocol.routing import partition_for_key

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "quickstart.ipynb"
KERNEL = "pulsar-spark-tests"
EVENTS = 20_000
USERS = 2000
PAGE_OF = ["home"] * 4 + ["search"] * 3 + ["product"] * 2 + ["cart", "checkout", "help", "blog"]
"""The page of event ``id`` is ``PAGE_OF[id * 7 % 13]``."""
ACTIONS = ["view", "click", "scroll", "purchase"]
ACTION_OF = ["view"] * 5 + ["click"] * 3 + ["scroll"] * 2 + ["purchase"]
"""The action of event ``id`` is ``ACTION_OF[id * 13 % 11]``."""


def expected_lines() -> list[str]:
    """Lines the notebook prints, computed from its event generator."""
    per_partition = Counter(partition_for_key(str(i % USERS), 4) for i in range(EVENTS))
    per_action = Counter(ACTION_OF[i * 13 % 11] for i in range(EVENTS))
    return [
        "broker running: True; partitioned topics: {'persistent://public/default/clicks': 4}",
        "20,000 events written",
        f"events per partition: {dict(sorted(per_partition.items()))}",
        "value: struct<id:bigint,page:string,action:string>",
        # event 1 (user "1"), typed by the JSON schema given: its page and action columns
        f"|   1|  1|{PAGE_OF[1 * 7 % 13]:>7}|{ACTION_OF[1 * 13 % 11]:>6}|",
        "rows per micro-batch: [5000, 5000, 5000, 5000]",
        "20,000 events landed in Parquet",
        f"events per action: { {a: per_action[a] for a in ACTIONS} }",
        "broker running: False",
    ]


def expected_table() -> list[tuple[str, list[int]]]:
    """Page, then its count per action and in total; busiest page first."""
    counts = Counter((PAGE_OF[i * 7 % 13], ACTION_OF[i * 13 % 11]) for i in range(EVENTS))
    rows = [(page, [counts[page, a] for a in ACTIONS]) for page in set(PAGE_OF)]
    return sorted(((page, [*n, sum(n)]) for page, n in rows), key=lambda row: (-row[1][-1], row[0]))


def stdout_of(nb: Any) -> str:
    return "".join(
        output.get("text", "")
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "stream" and output.name == "stdout"
    )


def pivot_table(text: str) -> list[tuple[str, list[int]]]:
    """The rows of the page x action table that ``DataFrame.show()`` printed, in order."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 6 and cells[0] in PAGE_OF:
            rows.append((cells[0], [int(c) for c in cells[1:]]))
    return rows


def check_outputs(nb: Any) -> None:
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert not [o for cell in code for o in cell.outputs if o.output_type == "error"]
    printed = stdout_of(nb).splitlines()
    for line in expected_lines():
        assert line in printed
    assert pivot_table(stdout_of(nb)) == expected_table()
    images = [o for cell in code for o in cell.outputs if "image/png" in o.get("data", {})]
    assert len(images) == 1  # the chart


def test_saved_notebook_has_its_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    assert nb.metadata.kernelspec.name == "python3"
    check_outputs(nb)


def test_notebook_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kernel_dir = tmp_path / "jupyter" / "kernels" / KERNEL
    kernel_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "pulsar-spark tests",
        "language": "python",
    }
    (kernel_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
    # The kernel imports the package from this checkout, installed or not.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )

    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        nb,
        timeout=600,
        kernel_name=KERNEL,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()
    check_outputs(nb)
