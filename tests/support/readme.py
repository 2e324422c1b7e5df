"""The documentation's named examples: fenced blocks preceded by ``<!-- example: NAME -->``.

The pages are README.md and every page of the documentation site (docs/*.md); an example's
name is unique across all of them.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference.md"  # every option of the `pulsar` format, in tables
EXAMPLE = re.compile(r"<!-- example: ([\w-]+) -->\n```(\w+)\n(.*?)\n```", re.DOTALL)


def pages() -> list[Path]:
    """README.md, then the documentation pages in name order."""
    return [README, *sorted(DOCS.glob("*.md"))]


def page_name(page: Path) -> str:
    """A page's path from the repository root, as the tests report it."""
    return page.relative_to(ROOT).as_posix()


def page_examples(page: Path) -> list[tuple[str, str, str]]:
    """(name, language, code) of every named example of one page, in page order."""
    return [(m[1], m[2], m[3]) for m in EXAMPLE.finditer(page.read_text(encoding="utf-8"))]


def examples() -> list[tuple[str, str, str]]:
    """(name, language, code) of every named example of every page."""
    return [found for page in pages() for found in page_examples(page)]


def example(name: str) -> str:
    """The code of the example called ``name``."""
    [code] = [code for n, _, code in examples() if n == name]
    return code


def source(name: str) -> str:
    """``page:name`` for the example called ``name``, the file name its code is compiled under."""
    [page] = [p for p in pages() if any(n == name for n, _, _ in page_examples(p))]
    return f"{page_name(page)}:{name}"
