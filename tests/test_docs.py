"""The README stays a first screen and its links hold (the manual in docs/ is checked by
`tox -e docs`, MkDocs in strict mode; the README is not part of that site)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_README_LINES = 300  # a newcomer reads it to the end; the manual holds the rest


def _links(text: str) -> list[str]:
    return [m for m in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", m)]


def test_readme_is_a_first_screen() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail to docs/"


def test_readme_links_resolve() -> None:
    broken = []
    for target in _links(README.read_text(encoding="utf-8")):
        path = target.split("#", 1)[0]
        if path and not (ROOT / path).exists():
            broken.append(target)
    assert not broken, f"README.md links to missing files: {broken}"


def test_every_manual_page_is_in_the_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = [p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")]
    missing = [p for p in pages if f": {p}" not in nav]
    assert not missing, f"pages not in mkdocs.yml's nav: {missing}"
