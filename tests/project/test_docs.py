"""The README stays a first screen and its links hold (the manual in docs/ is checked by
`tox -e docs`, MkDocs in strict mode; the README is not part of that site)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


def test_install_hints_are_the_readmes():
    """The install command an adapter's error, tck list or a CLI hint gives is the one the
    README gives (tck.usage.INSTALL, one wording)."""
    from tck.usage import INSTALL

    text = README.read_text(encoding="utf-8")
    missing = {extra: command for extra, command in INSTALL.items() if command not in text}
    assert not missing, f"README.md lacks the install commands {missing}"


def test_the_help_and_the_readme_name_the_same_adapters_and_commands(capsys):
    """Every built-in adapter, every form of --adapter and option that tck run's help
    names for a given model, and every tck subcommand appear in the README."""
    from tck.adapters import BUILTIN
    from tck.cli import build_parser, main

    text = README.read_text(encoding="utf-8")
    assert main(["run", "--help"]) == 0
    run_help = " ".join(capsys.readouterr().out.split())
    for form in ("module:attr", "onnx:FILE", "--model", "--component", "--map", "--baseline"):
        assert form in run_help, f"tck run --help does not name {form}"
        assert form.split(":")[0] in text, f"README.md does not name {form} (tck run --help does)"
    missing = [name for name in BUILTIN if f"`{name}`" not in text and f" {name} " not in text]
    assert not missing, f"README.md does not name the built-in adapters {missing}"
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    absent = [c for c in subparsers.choices if f"tck {c}" not in text]
    assert not absent, f"README.md does not show the commands {absent}"
