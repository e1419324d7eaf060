"""What ``tck run`` shows in the terminal: a progress bar while the checks run (stderr) and a
summary table at the end (stdout), both with rich."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from tck.reports.causes import root_causes
from tck.reports.text import visible

STYLE = {
    "pass": "green",
    "fail": "bold red",
    "error": "bold magenta",
    "convention": "yellow",
    "skip": "dim",
    "unverified": "cyan",
}


class ProgressPlugin:
    """A pytest plugin: one step of the bar per check, the failures counted as they come.

    It replaces pytest's terminal reporter, so collection errors (a check module that does
    not import) are printed here, in full, to stderr.
    """

    def __init__(self, console: Console):
        self.console = console
        self.progress = Progress(
            TextColumn("[bold]tck[/] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task = None
        self.failed = 0

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.console.print(f"[bold red]cannot collect {report.nodeid}[/]:")
            self.console.print(visible(str(report.longrepr)), markup=False, highlight=False)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._start(len(session.items))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        self._start(len(ids))  # under pytest-xdist: each worker collects the same checks

    def _start(self, total: int) -> None:
        if self.task is None and total:
            self.progress.start()
            self.task = self.progress.add_task("checks", total=total)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed += 1
        # "???": pytest-xdist's report for a check whose worker crashed
        if report.when in ("teardown", "???") and self.task is not None:
            label = f"checks ({self.failed} failed)" if self.failed else "checks"
            self.progress.update(self.task, advance=1, description=label)

    def pytest_sessionfinish(self) -> None:
        self.progress.stop()


def _print_rows(console: Console, rows: list[dict[str, Any]], *, limit: bool = True) -> None:
    for r in rows[:40]:
        line = Text(f"  {r['status'].upper():5} ", style=STYLE[r["status"]])
        line.append(  # adapter text: never parsed as markup, every control character visible
            visible(
                f"{r['check']} [{r['subject']}] §{','.join(r['clause'])}: "
                f"{r['diagnosis']['code']}: {r['diagnosis']['message'][:300]}"
            ),
            style="default",
        )
        console.print(line, highlight=False)
    if limit and len(rows) > 40:
        console.print(f"  ... and {len(rows) - 40} more in the report")


def _print_causes(console: Console, document: dict[str, Any], bad: list[dict[str, Any]]) -> None:
    """The failing checks grouped by root cause, most specific first, symptoms under each."""
    causes = root_causes({**r, "index": i} for i, r in enumerate(document["results"]))
    if causes:
        console.print(
            f"{len(causes)} root cause(s) of {len(bad)} failing check(s), most specific first:",
            markup=False,
            highlight=False,
        )
    shown = 0
    for cause in causes:
        header = Text(f"CAUSE {visible(cause['code'])}", style="bold red")
        header.append(  # adapter text: never parsed as markup, every control character visible
            visible(
                f" ({len(cause['symptoms'])} failing; {', '.join(cause['subjects'])}): "
                f"{cause['message'][:300]}"
            ),
            style="default",
        )
        console.print(header, highlight=False)
        rows = [document["results"][symptom["index"]] for symptom in cause["symptoms"]]
        _print_rows(console, rows[: max(0, 40 - shown)], limit=False)
        shown += len(rows)
    if len(bad) > 40:
        console.print(f"  ... and {len(bad) - 40} more failing checks in the report")


def print_summary(console: Console, document: dict[str, Any], out: Path, reports: dict) -> None:
    """The end of a run: counts per component, then every failure, then where things are."""
    s = document["summary"]
    statuses = ("pass", "fail", "error", "convention", "unverified", "skip")
    table = Table(title=Text(visible(f"tck {document['adapter']['name']}")), title_justify="left")
    table.add_column("component")
    for status in statuses:
        table.add_column(status, justify="right", style=STYLE[status])
    per_component: dict[str, Counter] = {}
    for r in document["results"]:
        per_component.setdefault(r["component"], Counter())[r["status"]] += 1
    for component, counts in per_component.items():
        table.add_row(Text(visible(component)), *(str(counts[st] or "") for st in statuses))
    console.print(table)
    bad = [r for r in document["results"] if r["status"] in ("fail", "error")]
    baseline = document.get("baseline")
    if baseline is not None:  # new failures first, each kind under its own heading
        from tck.reports.html import produced_by

        console.print(
            Text(f"baseline: {visible(baseline['path'])}, produced by: ", style="bold")
            + Text(visible(produced_by(baseline.get("run")))),
            highlight=False,
        )
        for accepted in baseline.get("accepted_mismatches", []):
            console.print(Text(f"  accepted mismatch: {visible(accepted)}"), highlight=False)
        groups = [
            ("new since the baseline (these fail the run)", "new"),
            ("still failing, known from the baseline", "known"),
        ]
        for heading, kind in groups:
            rows = [r for r in bad if r.get("baseline") == kind]
            console.print(Text(f"{heading}: {len(rows)}", style="bold"), highlight=False)
            _print_rows(console, rows)
        fixed = baseline["fixed"]
        console.print(Text(f"fixed since the baseline: {len(fixed)}", style="bold"))
        for key in fixed[:40]:
            console.print(Text(f"  FIXED {visible(key)}", style="green"), highlight=False)
    else:
        _print_causes(console, document, bad)
    # One line that scripts and CI logs can grep, in plain text.
    verdict = f"{s['passed']} passed, {s['failed']} failed, {s['errors']} errors, "
    if document.get("not_run"):
        verdict += f"{len(document['not_run'])} of them not run, "
    verdict += f"{s['skipped']} skipped, {s['conventions']} conventions"
    verdict += f", {s.get('unverified', 0)} unverified"
    if baseline is not None:
        verdict += (
            f"; baseline: {len(baseline['new'])} new, {len(baseline['known'])} known, "
            f"{len(baseline['fixed'])} fixed"
        )
    if document.get("interrupted"):
        verdict = f"INTERRUPTED: {verdict}"
    console.print(
        visible(
            f"tck {document['adapter']['name']}: {verdict} "
            f"({document['duration_s']:.1f} s, profile {document['profile']})"
        ),
        markup=False,
        highlight=False,
    )
    for label, path in (
        ("report: ", reports["html"]),
        ("results:", out / "results.json"),
        ("junit:  ", reports["junit"]),
    ):
        console.print(f"{label} {visible(str(path))}", markup=False, highlight=False)
