"""HTML pages from results.json: one per adapter run, and a scoreboard across runs.

Static files: inline CSS, inline SVG, a few lines of inline script for the copy buttons, no
network. jinja2 autoescapes everything; the only markup inserted unescaped is the SVG our
own plots module drew (``Markup``).
"""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from tck.reports.causes import root_causes

from . import plots
from .text import visible

# Worst first: the colour and the order a cell or a group takes.
STATUS_ORDER = ("fail", "error", "convention", "unverified", "pass", "skip")
# The count columns of every table, in the terminal summary's order too.
STATUS_COLUMNS = ("pass", "fail", "error", "convention", "unverified", "skip")
# Symptoms listed under a root cause, and failing checks under a component, before the
# rest fold away (a page stays readable at hundreds of failures).
SYMPTOMS_SHOWN = 8
_SPEC = Path(__file__).resolve().parent.parent / "SPEC.md"


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tck.reports", "templates"),
        autoescape=True,  # every template, whatever its file name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_inert,  # adapter text: every control character visible (tck.reports.text)
    )
    env.filters["num"] = format_number
    env.filters["anchor"] = anchor
    return env


def _inert(value: Any) -> Any:
    if isinstance(value, (Markup, int, float, jinja2.Undefined)) or value is None:
        return value
    return visible(value)


def format_number(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def anchor(text: str) -> str:
    """An id fragment made only of [a-z0-9-]: safe in href and id whatever the input."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "x"


@cache
def clause_titles() -> dict[str, str]:
    """SPEC.md clause number -> title, when the spec sits beside the package (a checkout or
    an editable install); empty otherwise, and the pages show numbers only."""
    try:
        text = _SPEC.read_text(encoding="utf-8")
    except OSError:
        return {}
    return dict(re.findall(r"^### §(\d+\.\d+) (.+)$", text, flags=re.MULTILINE))


def worst(statuses: Counter) -> str:
    return next((s for s in STATUS_ORDER if statuses.get(s)), "none")


def _clause_key(clause: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in clause.split("."))


def _summaries(results: list[dict[str, Any]]) -> tuple[dict, dict]:
    by_component: dict[str, Counter] = defaultdict(Counter)
    by_clause: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        by_component[r["component"]][r["status"]] += 1
        for clause in r["clause"]:
            by_clause[clause][r["status"]] += 1
    return dict(by_component), dict(sorted(by_clause.items(), key=lambda kv: _clause_key(kv[0])))


def fingerprint_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Declared against shown, per subject and convention field (the probes' results)."""
    rows = []
    for index, r in enumerate(document["results"]):
        if not r["check"].startswith("fingerprint."):
            continue
        m = r.get("metrics", {})
        field = m.get("field", r["check"].split(".", 1)[1])
        shown = m.get("shown")
        rows.append(
            {
                "index": index,
                "subject": r["subject"],
                "field": field,
                "declared": m.get("declared", "?"),
                "shown": ", ".join(map(str, shown)) if isinstance(shown, list) else "?",
                "canonical": m.get("canonical", "?"),
                "status": r["status"],
                "mismatch": r["status"] == "fail",
                "message": r["diagnosis"]["message"],
            }
        )
    return sorted(rows, key=lambda row: (row["subject"], row["field"]))


RUNTIMES = ("torch", "ORT_DISABLE_ALL", "ORT_ENABLE_ALL")


def exported_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Each check of each torch subject beside its runs as an exported ONNX graph (``tck run
    --export onnx``): one row per (check, subject, dtype), one cell per runtime; empty when
    nothing was exported."""
    results = document["results"]
    if not any(r["metrics"].get("runtime") == "onnxruntime" for r in results):
        return []
    rows: dict[tuple, dict[str, Any]] = {}
    for index, r in enumerate(results):
        m = r["metrics"]
        runtime = m.get("ort_opt_level") if m.get("runtime") == "onnxruntime" else "torch"
        subject = m.get("exported_from", r["subject"])
        opset = m.get("opset") if r["check"].startswith("onnx.") else None
        key = (r["check"], subject, str(m.get("dtype", "")), str(opset or ""))
        row = rows.setdefault(
            key,
            {"check": key[0], "subject": subject, "dtype": key[2], "opset": key[3], "cells": {}},
        )
        row["cells"][runtime] = {
            "status": r["status"],
            "index": index,
            "err": m.get("max_abs_err"),
            "code": r["diagnosis"].get("code", ""),
        }
    out = sorted(rows.values(), key=lambda row: (row["subject"], row["check"], row["dtype"]))
    for row in out:
        # a skip (no gradients in a graph, no float64 kernel) is a limit, not a difference
        statuses = {cell["status"] for cell in row["cells"].values()} - {"skip"}
        row["differs"] = len(statuses) > 1 or bool(statuses & {"fail", "error"})
    return out


def _numbers(metrics: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "max_abs_err",
        "mean_abs_err",
        "bound",
        "ratio",
        "ref_multiple",
        "dtype",
        "grad_of",
        "runtime",
    )
    return {k: metrics[k] for k in keys if k in metrics}


def report_context(document: dict[str, Any]) -> dict[str, Any]:
    results = document["results"]
    by_component, by_clause = _summaries(results)
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for index, r in enumerate(results):
        groups[r["component"]].append({**r, "index": index, "numbers": _numbers(r["metrics"])})
    rank = {s: i for i, s in enumerate(STATUS_ORDER)}
    ordered = {
        component: sorted(items, key=lambda r: (rank.get(r["status"], 9), r["check"]))
        for component, items in sorted(
            groups.items(), key=lambda kv: (rank[worst(by_component[kv[0]])], kv[0])
        )
    }
    svgs = [
        plots.ratio_per_dtype(results),
        plots.ref_multiple_per_dtype(results),
        plots.error_vs_length(results),
    ]
    return {
        "doc": document,
        "adapter": document["adapter"],
        "subject_notes": subject_notes(document),
        "summary": document["summary"],
        "started": _when(document.get("started")),
        "by_component": by_component,
        "by_clause": by_clause,
        "titles": clause_titles(),
        "worst": worst,
        "fingerprint": fingerprint_rows(document),
        "exported": exported_rows(document),
        "runtimes": RUNTIMES,
        "groups": ordered,
        "problems": [r for rs in ordered.values() for r in rs if r["status"] in ("fail", "error")],
        "causes": root_causes({**r, "index": i} for i, r in enumerate(results)),
        "plots": [Markup(svg) for svg in svgs if svg],
        "statuses": STATUS_COLUMNS,
        "symptoms_shown": SYMPTOMS_SHOWN,
        "clause_rows": sum(len(r["clause"]) for r in results),
        "interrupted": bool(document.get("interrupted")),
        "not_run": list(document.get("not_run", [])),
        "baseline": _baseline(document),
    }


def _baseline(document: dict[str, Any]) -> dict[str, Any] | None:
    """New, still-failing and fixed rows of a ``tck run --baseline`` run, or None."""
    baseline = document.get("baseline")
    if not baseline:
        return None
    rows = [{**r, "index": i} for i, r in enumerate(document["results"])]
    return {
        "path": baseline["path"],
        "new": [r for r in rows if r.get("baseline") == "new"],
        "known": [r for r in rows if r.get("baseline") == "known"],
        "fixed": list(baseline["fixed"]),
        "produced_by": produced_by(baseline.get("run")),
        "accepted": list(baseline.get("accepted_mismatches", [])),
    }


def subject_notes(document: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """Each distinct note of the adapter's subjects (what a checkpoint's config.json set, the
    parts not checked, ...), with the subjects it applies to, in first-seen order."""
    seen: dict[str, list[str]] = {}
    for subject, notes in sorted((document.get("adapter", {}).get("notes") or {}).items()):
        for note in notes:
            seen.setdefault(str(note), []).append(str(subject))
    return list(seen.items())


def produced_by(run: Any) -> str:
    """What produced a run, in one line (``adapter 'x' (X), profile ci, seed 0, ...``)."""
    if not isinstance(run, dict):
        return "not recorded"
    parts = [f"adapter {run.get('adapter')!r} ({run.get('adapter_name')})"]
    parts += [f"{k} {run.get(k)}" for k in ("profile", "seed") if k in run]
    only = run.get("only")
    parts.append(f"only {','.join(map(str, only))}" if isinstance(only, list) else "all components")
    parts += [f"{k} {run.get(k)}" for k in ("export", "opset", "device") if run.get(k)]
    parts.append(f"{len(run.get('subjects') or [])} subjects, tck {run.get('tck')}")
    return ", ".join(parts)


def _when(timestamp: Any) -> str:
    if not isinstance(timestamp, (int, float)):
        return ""
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def render_report(document: dict[str, Any]) -> str:
    return _environment().get_template("report.html.j2").render(**report_context(document))


def render_scoreboard(runs: list[tuple[Path, dict[str, Any]]], out_dir: Path) -> str:
    """``runs``: (folder holding results.json and index.html, its document)."""
    columns = []
    clauses: set[str] = set()
    for folder, document in runs:
        _, by_clause = _summaries(document["results"])
        clauses |= set(by_clause)
        link = os.path.relpath(folder / "index.html", out_dir)
        columns.append(
            {
                "name": document["adapter"]["name"] or folder.name,
                "folder": str(folder),
                "link": Path(link).as_posix(),
                "summary": document["summary"],
                "by_clause": by_clause,
                "profile": document.get("profile"),
                "seed": document.get("seed"),
            }
        )
    return (
        _environment()
        .get_template("scoreboard.html.j2")
        .render(
            columns=columns,
            clauses=sorted(clauses, key=_clause_key),
            titles=clause_titles(),
            worst=worst,
            statuses=STATUS_COLUMNS,
        )
    )
