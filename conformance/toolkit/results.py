"""What a check concludes: a Result per (check, subject), and the exceptions checks raise.

``results.json`` (schema 1) is the single source every report renders.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tck.reports.files import atomic_write
from tck.reports.text import visible

STATUSES = ("pass", "fail", "skip", "error", "convention", "unverified")
SCHEMA = 1


class CheckFailure(AssertionError):
    """A check found a violation. ``code`` names the bug class in dotted form
    (``mask.polarity_inverted``); ``message`` says it in words, with numbers."""

    def __init__(self, code: str, message: str, metrics: dict[str, Any] | None = None):
        super().__init__(f"[{code}] {message}")
        self.code, self.message, self.metrics = code, message, dict(metrics or {})


@dataclass
class Result:
    check: str  # "<area>.<name>", e.g. "attention.oracle_equality"
    clause: list[str]  # SPEC.md clause numbers
    component: str  # the SPEC component
    subject: str  # the adapter's subject name ("mha[seq_first]")
    status: str  # one of STATUSES
    diagnosis: dict[str, str] = field(default_factory=lambda: {"code": "", "message": ""})
    metrics: dict[str, Any] = field(default_factory=dict)
    repro: str = ""  # Python that shows the failure when pasted into `python`
    counterexample: str = ""  # hypothesis' falsifying example, when hypothesis found it
    notes: list[str] = field(default_factory=list)  # the adapter's words on this subject
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(asdict(self))


def _jsonable(value: Any) -> Any:
    """JSON has no NaN or Infinity: write them as strings so the file stays standard. Text
    is made inert (tck.reports.text.visible): no control character or undecodable byte
    reaches the file or anything rendered from it."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {visible(str(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _jsonable(value.item())
    return value


def summarize(results: list[Result]) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "conventions": 0}
    counts["unverified"] = 0  # ran and agreed, but measured nothing (SPEC.md §10.11)
    key = {
        "pass": "passed",
        "fail": "failed",
        "skip": "skipped",
        "error": "errors",
        "convention": "conventions",
        "unverified": "unverified",
    }
    for r in results:
        counts[key[r.status]] += 1
    return counts


def write_results(path: Path, document: dict[str, Any]) -> None:
    """Write results.json whole or not at all (a temporary file, then a rename)."""
    atomic_write(path, json.dumps(_jsonable(document), indent=1, ensure_ascii=False) + "\n")


def reported(nodeid: str) -> bool:
    """Does this pytest item give a result row? "[NOTSET": pytest's placeholder for a check
    that no subject of the adapter takes, which the results leave out (and so does the bar,
    so that it counts to the number of rows the summary reports)."""
    return "[NOTSET" not in nodeid
