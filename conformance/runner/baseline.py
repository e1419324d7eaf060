"""``tck run --baseline OLD/results.json``: adopt tck on a model with known deviations.

As linters adopt a baseline, a run compares its failures with an earlier run's: a row that
failed (or errored) there with the same diagnosis code is *known* and does not make the run
red; any other failure or error is *new* and does; a row that failed there and passes now
is *fixed*. A check that did not run (``run.*`` codes: interrupted, not run) is never
known. Each result that failed or errored gets ``baseline: new | known``, and the document
a ``baseline`` section listing the three kinds by key (``check[subject]``, with the dtype
and opset where a check runs once per each: unique per run).

A comparison means something only between runs of the same thing: every results.json
records what produced it (its ``run`` section: the adapter as named, its name and class,
its subjects, ``--only``, ``--export``, ``--opset``, ``--device`` and the tck version;
with the top-level ``profile`` and ``seed``). A baseline that differs in any of them, or
records none, is refused in one line unless the user says the comparison is intended
(``--accept-baseline-mismatch``); the differences accepted are then listed in the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tck
from tck.reports import ReportError, load_results
from tck.reports.junit import _case_name
from tck.reports.text import visible
from tck.usage import UsageError

BAD = ("fail", "error")


def key(result: dict[str, Any]) -> str:
    return _case_name(result)


def provenance(
    adapter_spec: str,
    adapter: Any,
    subjects: list[Any],
    *,
    only: list[str] | None,
    export: str | None,
    opset: int | None,
    device: str,
) -> dict[str, Any]:
    """What produced a run, beside its top-level ``profile`` and ``seed``: the ``run``
    section of results.json, compared by ``--baseline``."""
    return {
        "adapter": adapter_spec,
        "adapter_name": getattr(adapter, "name", None),
        "adapter_class": f"{type(adapter).__module__}.{type(adapter).__qualname__}",
        "subjects": sorted(str(s.name) for s in subjects),
        "only": list(only) if only is not None else None,
        "export": export,
        "opset": opset,
        "device": device,
        "tck": tck.__version__,
    }


def mismatches(old: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """How the run that wrote ``old`` (a results document) differs from this one (``now``:
    its ``run`` section with ``profile`` and ``seed``), one phrase per field; empty when the
    two are runs of the same thing."""
    recorded = old.get("run")
    if not isinstance(recorded, dict):
        return ["it records no provenance (written by an older tck, or edited)"]
    recorded = {**recorded, "profile": old.get("profile"), "seed": old.get("seed")}
    return [
        f"{field} {_shown(recorded.get(field))} (this run: {_shown(value)})"
        for field, value in now.items()
        if recorded.get(field) != value
    ]


def _shown(value: Any) -> str:
    if isinstance(value, list):
        value = ",".join(map(str, value))
    return visible(repr(value))[:120]


def require_same_run(
    old: dict[str, Any], now: dict[str, Any], path: str | Path, *, accept: bool
) -> list[str]:
    """The differences between the baseline's run and this one; a UsageError naming them
    unless ``accept`` (the user said comparing them is intended)."""
    differences = mismatches(old, now)
    if differences and not accept:
        raise UsageError(
            f"--baseline {str(path)!r} was written by another run: {'; '.join(differences)}; "
            "rerun the baseline with this run's options, or pass --accept-baseline-mismatch "
            "if comparing them is intended"
        )
    return differences


def load_baseline(path: str | Path) -> dict[str, Any]:
    """The earlier run's document; ``path`` is its results.json or the folder holding it."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    if not path.is_dir() and path.name != "results.json":
        raise ReportError(
            f"--baseline {str(path)!r}: name a results.json written by 'tck run' (or its folder)"
        )
    try:
        return load_results(folder)
    except ReportError as err:
        raise ReportError(f"--baseline: {err}") from None


def apply_baseline(
    document: dict[str, Any],
    old: dict[str, Any],
    path: str | Path,
    accepted: list[str] | tuple[str, ...] = (),
) -> None:
    """Mark ``document``'s failures new or known against ``old``, and list the fixed, what
    produced ``old`` and the differences from this run the user ``accepted``."""
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
        "run": {
            **(old.get("run") if isinstance(old.get("run"), dict) else {}),
            "profile": old.get("profile"),
            "seed": old.get("seed"),
        },
        "accepted_mismatches": list(accepted),
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
