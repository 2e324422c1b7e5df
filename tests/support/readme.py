"""The README's named examples: fenced blocks preceded by ``<!-- readme-example: NAME -->``."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
EXAMPLE = re.compile(r"<!-- readme-example: ([\w-]+) -->\n```(\w+)\n(.*?)\n```", re.DOTALL)


def examples() -> list[tuple[str, str, str]]:
    """(name, language, code) of every named example, in README order."""
    return [(m[1], m[2], m[3]) for m in EXAMPLE.finditer(README.read_text(encoding="utf-8"))]


def example(name: str) -> str:
    """The code of the example called ``name``."""
    [code] = [code for n, _, code in examples() if n == name]
    return code
