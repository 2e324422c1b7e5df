"""ruff and mypy are part of the test suite, so CI fails on lint or type errors."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINTED = ["pulsar_spark", "tests", "benchmarks"]


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = Path(sys.executable).parent / tool
    found = str(path) if path.exists() else shutil.which(tool)
    assert found, f"{tool} is not installed: `make test` installs the dev extras"
    return subprocess.run([found, *args], cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_check() -> None:
    result = _run("ruff", "check", *LINTED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = _run("ruff", "format", "--check", *LINTED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy() -> None:
    result = _run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
