"""``python -m pulsar_spark.jobs.demo`` (what ``make demo`` runs), run small, as a user runs it.

The demo starts its own pulsar-lite broker and Spark, so it runs as a separate process. Every
number it prints about the data is checked against counts computed here from the way the demo
generates its events: the page and action table, the busiest users, and the events per
partition, which follow Java's key routing (predicted with the connector's ``partition_for_key``,
which ``test_java_interop`` holds to the partitions Apache Pulsar's Java producer picks).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from pulsar_spark.protocol.routing import partition_for_key

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
EVENTS = 6000  # users 0..999 get two events, users 1000..4999 one
PER_TRIGGER = 2000
USERS = 5000
PAGES = ["home", "search", "product", "cart", "checkout", "help", "blog", "account"]
ACTIONS = ["view"] * 5 + ["click"] * 3 + ["scroll"] * 2 + ["purchase"]  # by id * 13 % 11
PARTITIONS = 4


def expected_table() -> dict[str, dict[str, int]]:
    table = {page: dict.fromkeys(("view", "click", "scroll", "purchase"), 0) for page in PAGES}
    for i in range(EVENTS):
        table[PAGES[i * 7 % 8]][ACTIONS[i * 13 % 11]] += 1
    return table


def run_demo(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    command = [
        sys.executable,
        "-m",
        "pulsar_spark.jobs.demo",
        "--events",
        str(EVENTS),
        "--per-trigger",
        str(PER_TRIGGER),
        "--output",
        str(tmp_path / "demo"),
    ]
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False
    )


def test_demo(tmp_path: Path) -> None:
    result = run_demo(tmp_path)
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]

    assert "==> starting embedded pulsar-lite with topic 'clicks' (4 partitions)" in out
    assert "==> writing 6,000 click events with df.write.format('pulsar')" in out
    assert re.search(r"^    6,000 events in [\d.]+s = [\d,]+ msg/s$", out, re.MULTILINE)

    # The stream: AvailableNow in micro-batches of exactly --per-trigger messages.
    batches = re.findall(r"^    micro-batch (\d+): ([\d,]+) rows in \d+ ms$", out, re.MULTILINE)
    assert batches == [("0", "2,000"), ("1", "2,000"), ("2", "2,000")]
    assert re.search(
        r"^    6,000 events in [\d.]+s = [\d,]+ msg/s \(incl\. start-up\)$", out, re.MULTILINE
    )

    # The aggregate over the Parquet output.
    assert "    6,000 events landed; per page and action:" in out
    rows = re.findall(r"^    (\w+) +([\d,]+) +([\d,]+) +([\d,]+) +([\d,]+)$", out, re.MULTILINE)
    columns = ("view", "click", "scroll", "purchase")
    table = {
        page: {c: int(n.replace(",", "")) for c, n in zip(columns, counts, strict=True)}
        for page, *counts in rows
    }
    assert table == expected_table()
    assert list(table) == sorted(PAGES)

    per_user = Counter(str(i % USERS) for i in range(EVENTS))
    top = sorted(per_user.items(), key=lambda item: (-item[1], item[0]))[:3]
    assert f"    busiest users: {', '.join(f'{u} ({n})' for u, n in top)}" in out
    assert top == [("0", 2), ("1", 2), ("10", 2)]

    [line] = re.findall(r"^    events per partition: (\{.*\})$", out, re.MULTILINE)
    per_partition = Counter(partition_for_key(str(i % USERS), PARTITIONS) for i in range(EVENTS))
    assert ast.literal_eval(line) == dict(sorted(per_partition.items()))
    assert sum(per_partition.values()) == EVENTS

    assert re.search(r"^==> done in \d+s; Parquet output in .*demo$", out, re.MULTILINE)
    assert "!!" not in out
    assert (tmp_path / "demo" / "events").is_dir()


def run_python(*args: str) -> subprocess.CompletedProcess[str]:
    """This interpreter with ``args``, importing the package from this checkout; it must
    end within two minutes (these runs stop before Spark starts)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_demo_without_pulsar_lite_names_the_extra(tmp_path: Path) -> None:
    """Without pulsar-lite the demo stops before starting Spark and says what to install."""
    hide = "import sys; sys.modules['pulsar_lite.binary_finder'] = None; "
    run = "from pulsar_spark.jobs import demo; sys.exit(demo.main(['--output', sys.argv[1]]))"
    result = run_python("-c", hide + run, str(tmp_path / "demo"))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "the embedded broker needs pulsar-lite, which is not installed; install it with the "
        '"local" extra: pip install "pulsar-spark[local]"; or run the demo on a cluster with '
        "--service-url"
    )
    assert "starting Spark" not in result.stdout


def test_demo_refuses_an_output_directory_it_did_not_make(tmp_path: Path) -> None:
    """``--output`` naming a directory that holds something the demo did not write: the demo
    stops before starting a broker or Spark, and the directory keeps what it held."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me", encoding="utf-8")
    result = run_python("-m", "pulsar_spark.jobs.demo", "--output", str(out))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"--output {out} is not empty and was not made by the demo, which would delete what "
        "it holds; give a new or empty directory"
    )
    assert "starting" not in result.stdout
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert (out / "notes.txt").read_text(encoding="utf-8") == "keep me"
