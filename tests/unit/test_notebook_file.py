"""The quick-start notebook as saved in the repository: outputs a reader may see, and nothing
of the machine that ran it (paths, Spark's and Java's warnings, run times)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"
MACHINE = re.compile(r"/(?:work|home|root|tmp|usr|opt)/|site-packages|WARN|Warning")


def test_saved_outputs_hold_no_stderr_and_no_machine_details() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for index, cell in enumerate(nb.cells):
        assert "execution" not in cell.metadata, f"cell {index} keeps its run times"
        for output in cell.get("outputs", []):
            assert output.get("name") != "stderr", (
                f"cell {index} saved a stderr output: clear it before saving the notebook"
            )
            texts = [output.get("text", "")]
            texts += [v for k, v in output.get("data", {}).items() if k.startswith("text/")]
            for text in texts:
                found = MACHINE.search("".join(text))
                assert found is None, f"cell {index} output shows {found.group()!r}"


def test_notebook_says_how_to_open_it() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert "pip install jupyterlab" in nb.cells[0].source
