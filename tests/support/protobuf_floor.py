"""The oldest protobuf runtime the package accepts, as pyproject.toml states it."""

from __future__ import annotations

from pathlib import Path

import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def protobuf_floor() -> str:
    """The version of the ``protobuf>=...`` lower bound in pyproject.toml's dependencies."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    [protobuf] = [r for r in map(Requirement, project["dependencies"]) if r.name == "protobuf"]
    [floor] = [s.version for s in protobuf.specifier if s.operator == ">="]
    return floor
