"""``tck run --baseline OLD/results.json``: adopt tck on a model with known deviations.

As linters adopt a baseline, a run compares its failures with an earlier run's: a row that
failed (or errored) there with the same diagnosis code is *known* and does not make the run
red; any other failure or error is *new* and does; a row that failed there and passes now
is *fixed*. A check that did not run (``run.*`` codes: interrupted, not run) is never
known. Each result that failed or errored gets ``baseline: new | known``, and the document
a ``baseline`` section listing the three kinds by key (``check[subject]``, with the dtype
and opset where a check runs once per each: unique per run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tck.reports import ReportError, load_results
from tck.reports.junit import _case_name

BAD = ("fail", "error")


def key(result: dict[str, Any]) -> str:
    return _case_name(result)


def load_baseline(path: str | Path) -> dict[str, Any]:
    """The earlier run's document; ``path`` is its results.json or the folder holding it."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    if not path.is_dir() and path.name != "results.json":
        raise ReportError(
            f"--baseline {str(path)!r}: name a results.json written by 'tck run' (or its folder)"
        )
    return load_results(folder)


def apply_baseline(document: dict[str, Any], old: dict[str, Any], path: str | Path) -> None:
    """Mark ``document``'s failures new or known against ``old``, and list the fixed."""
    known_codes = {
        key(r): r["diagnosis"]["code"]
        for r in old["results"]
        if r["status"] in BAD and not r["diagnosis"]["code"].startswith("run.")
    }
    now = {key(r): r for r in document["results"]}
    new, known = [], []
    for r in document["results"]:
        if r["status"] not in BAD:
            r.pop("baseline", None)
            continue
        k = key(r)
        if known_codes.get(k) == r["diagnosis"]["code"]:
            r["baseline"] = "known"
            known.append(k)
        else:
            r["baseline"] = "new"
            new.append(k)
    fixed = [k for k in known_codes if k in now and now[k]["status"] in ("pass", "convention")]
    document["baseline"] = {
        "path": str(path),
        "new": sorted(new),
        "known": sorted(known),
        "fixed": sorted(fixed),
    }


def red(document: dict[str, Any]) -> bool:
    """Does this run fail: a failure or error (a new one, under a baseline), a check that
    did not run, or an interrupted run?"""
    if document.get("interrupted") or document.get("not_run"):
        return True
    if document.get("unverified_subjects"):  # nothing verified on a subject: not green
        return True
    if "baseline" in document:
        return bool(document["baseline"]["new"])
    s = document["summary"]
    return bool(s["failed"] or s["errors"])
