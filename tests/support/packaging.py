"""Building this checkout's wheel and installing it into new virtual environments.

Used by the tests that install the package as a user does (``test_packaging.py``), ship it to
a Spark cluster (``test_deployment.py``) or load it under the oldest protobuf it accepts
(``test_protobuf_floor.py``).
"""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
NOT_SOURCE = {
    ".git",
    ".venv",
    ".venv-proto",
    "build",
    "dist",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    "demo-output",
    "site",
}
PIP = [sys.executable, "-m", "pip", "--quiet", "--disable-pip-version-check"]


def _not_source(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n in NOT_SOURCE or n.endswith(".egg-info")}


def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``command``; fail the test with the end of its output unless it succeeds."""
    result = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def clean_env(python: Path) -> dict[str, str]:
    """The environment a user's shell would have: no PYTHONPATH, Spark's Python is ``python``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = str(python)
    return env


def copy_source(work: Path) -> Path:
    """This checkout's source tree, copied without build leftovers."""
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=_not_source, symlinks=True)
    return source


def build_wheel(work: Path) -> Path:
    """The wheel of this checkout, built from a copy of it (so no stale ``build/`` slips in)."""
    source = copy_source(work)
    dist = work / "dist"
    run(
        [*PIP, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(dist), str(source)],
        timeout=300,
    )
    [wheel] = dist.glob("pulsar_spark-*.whl")
    return wheel


def new_venv(path: Path) -> tuple[Path, Path]:
    """A virtual environment without pip (pip is run from outside with ``--python``): its
    interpreter and its site-packages directory."""
    run([sys.executable, "-m", "venv", "--without-pip", str(path)], timeout=120)
    python = path / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site_packages = Path(run([str(python), "-c", purelib]).stdout.strip()).resolve()
    return python, site_packages


def see_test_environment(site_packages: Path) -> None:
    """Let a new environment import the test environment's packages, after its own: a ``.pth``
    file adds them at the end of ``sys.path``."""
    outer = dict.fromkeys(sysconfig.get_path(name) for name in ("purelib", "platlib"))
    (site_packages / "test-environment.pth").write_text("\n".join(outer) + "\n")


def pip_install(python: Path, *arguments: str) -> None:
    """``pip install`` into the environment of ``python``. Without ``PYTHONPATH``: pip would
    take a checkout on it (with its ``pulsar_spark.egg-info``) for an installed pulsar-spark."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run([*PIP, "--python", str(python), "install", *arguments], env=env, timeout=600)


def requirements(wheel: Path) -> list[Requirement]:
    """The wheel's dependencies, without those of its extras."""
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(archive.read(name))
    found = [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]
    return [r for r in found if r.marker is None or "extra" not in str(r.marker)]


def venv_script(name: str) -> str:
    """A command the test environment installs (``spark-submit``, ``spark-class``, which come
    with pyspark; ``venv-pack``): beside this interpreter, else on ``PATH``."""
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    assert found, f"{name} is not installed"
    return found


def spark_home() -> Path:
    """The Spark that comes with the test environment's pyspark (its ``bin``, ``sbin`` and
    ``jars``), to name as ``SPARK_HOME`` where the Python that runs lacks pyspark."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent
