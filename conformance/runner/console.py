"""What ``tck run`` shows in the terminal: a progress bar while the checks run (stderr) and a
summary table at the end (stdout), both with rich."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from tck.adapters import BUILTIN
from tck.conformance.toolkit.results import reported
from tck.reports.causes import root_causes
from tck.reports.html import STATUS_COLUMNS
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
        self._start(sum(reported(item.nodeid) for item in session.items))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        # under pytest-xdist: each worker collects the same checks
        self._start(sum(reported(nodeid) for nodeid in ids))

    def _start(self, total: int) -> None:
        if self.task is None and total:
            self.progress.start()
            self.task = self.progress.add_task("checks", total=total)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed += 1
        # "???": pytest-xdist's report for a check whose worker crashed
        if report.when in ("teardown", "???") and self.task is not None and reported(report.nodeid):
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


def _subject_names(document: dict[str, Any]) -> list[str]:
    """The subject names a skip message may start with, longest first (``name:subject`` and
    ``subject``), so that one reason given to many subjects is counted once."""
    adapter = document["adapter"]["name"] or ""
    subjects = {r["subject"] for r in document["results"]}
    names = [f"{adapter}:{s}" for s in subjects] + list(subjects)
    return sorted(names, key=len, reverse=True)


def skip_reasons(document: dict[str, Any]) -> list[tuple[str, int, int]]:
    """The skipped rows grouped by reason, most common first: (reason, rows, subjects). A
    reason that names its subject is grouped with the same reason for other subjects."""
    names = _subject_names(document)
    rows: Counter = Counter()
    subjects: dict[str, set[str]] = {}
    for r in document["results"]:
        if r["status"] != "skip":
            continue
        reason = r["diagnosis"]["message"].split("\n", 1)[0]
        for name in names:  # whole names only: "layer_norm" is not in "layer_norm_rows"
            if name and name in reason:
                reason = re.sub(rf"(?<!\w){re.escape(name)}(?!\w)", "<subject>", reason)
        rows[reason] += 1
        subjects.setdefault(reason, set()).add(r["subject"])
    return [(reason, n, len(subjects[reason])) for reason, n in rows.most_common()]


def conventions_shown(document: dict[str, Any]) -> list[tuple[str, Any, Any, list[str]]]:
    """The convention rows as (field, declared, canonical, subjects), one per declared value:
    what the adapter declares differently from the canonical spec and the probes showed."""
    groups: dict[tuple[str, str, str], set[str]] = {}
    values: dict[tuple[str, str, str], tuple[Any, Any]] = {}
    for r in document["results"]:
        if r["status"] != "convention":
            continue
        metrics = r.get("metrics", {})
        deviations = document["adapter"].get("deviations", {}).get(r["subject"], {})
        # a row that is not a probe's names its field by its code, alone or followed by the
        # value (numerics.half_precision_input_dtype): the values are the declared ones
        tail = r["diagnosis"]["code"].split(".", 1)[-1]
        named = [f for f in deviations if tail == f or tail.startswith(f + "_")]
        field = metrics.get("field") or max(named, key=len, default=tail)
        deviation = deviations.get(field)
        canonical, declared = deviation if deviation else ("?", "?")
        declared = metrics.get("declared", declared)
        canonical = metrics.get("canonical", canonical)
        key = (str(field), repr(declared), repr(canonical))
        groups.setdefault(key, set()).add(r["subject"])
        values[key] = (declared, canonical)
    return [(key[0], *values[key], sorted(subjects)) for key, subjects in sorted(groups.items())]


def _print_conventions_and_skips(console: Console, document: dict[str, Any]) -> None:
    shown = conventions_shown(document)
    if shown:
        console.print(
            f"{document['summary']['conventions']} convention row(s): declared deviations from "
            "the canonical spec that the probes showed (not failures):",
            markup=False,
            highlight=False,
        )
        for field, declared, canonical, subjects in shown:
            names = ", ".join(subjects)
            console.print(
                Text(
                    visible(f"  {field} = {declared!r} (canonical {canonical!r}): {names}"),
                    style=STYLE["convention"],
                ),
                highlight=False,
            )
    reasons = skip_reasons(document)
    if reasons:
        console.print(
            f"{document['summary']['skipped']} skipped, by reason (most common first):",
            markup=False,
            highlight=False,
        )
        for reason, rows, subjects in reasons[:8]:
            where = f" ({subjects} subjects)" if subjects > 1 else ""
            console.print(
                Text(visible(f"  {rows:4}  {reason[:150]}{where}"), style=STYLE["skip"]),
                highlight=False,
            )
        if len(reasons) > 8:
            console.print(
                f"  ... and {len(reasons) - 8} more reasons in the report",
                markup=False,
                highlight=False,
            )


NEXT_FAILED = (
    "Next: open {report}: each failure has its root cause and a repro to paste into python."
)
NEXT_OWN = (
    "Next: check your own model: tck run --adapter mypkg.models:model --component "
    "encoder_layer, a checkpoint folder: tck run --model DIR, an ONNX file: tck run "
    "--adapter onnx:FILE --component NAME (README, 'Check your own model')."
)
NEXT_CI = (
    "Next: keep it so in CI: commit {out}/results.json and run with --baseline "
    "(README, 'In CI, with a baseline')."
)
NEXT_UNVERIFIED = (
    "Next: open {report}: the unverified rows say what the run could not measure (give the "
    "adapter parameter access, or a --map, for the oracle checks)."
)


def next_step(document: dict[str, Any], out: Path, report: Path) -> str:
    """One line on what to run or read next: the report when something failed or went
    unmeasured, your own model after a built-in adapter's clean run, CI after your own's."""
    s = document["summary"]
    if s["failed"] or s["errors"]:
        return NEXT_FAILED.format(report=report)
    if s.get("unverified"):
        return NEXT_UNVERIFIED.format(report=report)
    if document["adapter"]["name"] in BUILTIN:
        return NEXT_OWN
    return NEXT_CI.format(out=out)


def print_summary(console: Console, document: dict[str, Any], out: Path, reports: dict) -> None:
    """The end of a run: counts per component, then every failure, then where things are."""
    s = document["summary"]
    statuses = STATUS_COLUMNS
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
    _print_conventions_and_skips(console, document)
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
    nothing = document.get("unverified_subjects") or []
    if nothing:
        verdict += (
            f"; NOTHING VERIFIED on {len(nothing)} subject(s): {', '.join(nothing[:8])}"
            f"{' ...' if len(nothing) > 8 else ''} (every check skipped: see the skip reasons)"
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
    console.print(visible(next_step(document, out, reports["html"])), markup=False, highlight=False)
