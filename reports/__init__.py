"""Renderings of results.json: an HTML page per run, a scoreboard across runs, JUnit XML.

    from tck.reports import load_results, write_reports, write_scoreboard

    document = load_results("reports/out/torch.nn")        # reads and checks results.json
    write_reports(document, "reports/out/torch.nn")        # index.html + junit.xml
    write_scoreboard(["reports/out/reference", "reports/out/torch.nn"], "reports/out")

results.json is the single source: every page can be rebuilt from it (``tck report``).
Generated reports go to reports/out/ by default, which git ignores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tck.usage import read_user_json

from .files import atomic_write
from .junit import junit_xml
from .schema import problem
from .text import visible

__all__ = ["ReportError", "junit_xml", "load_results", "write_reports", "write_scoreboard"]

SCHEMA = 1  # the results.json schema these renderings read
_REQUIRED = ("schema", "adapter", "summary", "results")


class ReportError(Exception):
    """A results folder that cannot be rendered; the message says which and why."""


def load_results(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / "results.json"
    if not path.exists() and not path.is_symlink():
        raise ReportError(
            f"{path} does not exist; pass a folder written by 'tck run --out DIR'"
        ) from None
    document = read_user_json(
        path, what=str(path), hint="pass a folder written by 'tck run'", error=ReportError
    )
    if not isinstance(document, dict):
        raise ReportError(
            f"{path} is not a tck results file: it holds a JSON {type(document).__name__}, "
            "not an object; rerun 'tck run'"
        )
    missing = [k for k in _REQUIRED if k not in document]
    if missing:
        raise ReportError(f"{path} is not a tck results file: no {', '.join(missing)}")
    if document["schema"] != SCHEMA:
        raise ReportError(
            f"{path} has results schema {visible(repr(document['schema']))[:80]}; "
            f"this tck reads schema {SCHEMA}"
        )
    wrong = problem(document)
    if wrong is not None:
        raise ReportError(
            f"{path} is not a valid tck results file ({visible(wrong)}); rerun 'tck run'"
        )
    return document


def write_reports(document: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write OUT/index.html and OUT/junit.xml for one run."""
    from .html import render_report

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"html": out / "index.html", "junit": out / "junit.xml"}
    atomic_write(paths["html"], render_report(document))  # a temporary file, then a rename
    atomic_write(paths["junit"], junit_xml(document))
    return paths


def write_scoreboard(folders: list[str | Path], out_dir: str | Path) -> Path:
    """Write OUT/scoreboard.html across the runs in ``folders`` (each re-rendered too)."""
    from .html import render_scoreboard

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for folder in map(Path, folders):
        document = load_results(folder)
        write_reports(document, folder)
        runs.append((folder, document))
    path = out / "scoreboard.html"
    atomic_write(path, render_scoreboard(runs, out))
    return path
