"""The detection matrix: which checks kill which mutant, with which diagnosis codes.

    python -m tck.adapters.mutants.matrix OUT.json NAME=DIR/results.json ...

``build_matrix`` reads each mutant's ``results.json`` and keeps its failing results:
``{mutant: {check: [codes]}}``. ``write_matrix`` writes that with, per mutant, the codes it
was expected to produce and whether one of them was reported (``killed``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

Matrix = dict[str, dict[str, list[str]]]


def _document(source: str | Path | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(source, Mapping):
        return source
    return json.loads(Path(source).read_text(encoding="utf-8"))


def failing_codes(document: Mapping[str, Any]) -> dict[str, list[str]]:
    """check -> the sorted diagnosis codes of its failing results (over all subjects). An
    error counts when its code names a cause (the implementation raised in a way the suite
    names, as a weight multiplied in the wrong orientation); a bare ``adapter.*`` error does
    not."""
    found: dict[str, set[str]] = {}
    for result in document["results"]:
        code = (result.get("diagnosis") or {}).get("code", "")
        named = result["status"] == "error" and code and not code.startswith("adapter.")
        if result["status"] == "fail" or named:
            found.setdefault(result["check"], set()).add(code)
    return {check: sorted(codes) for check, codes in sorted(found.items())}


def build_matrix(results: Mapping[str, str | Path | Mapping[str, Any]]) -> Matrix:
    """``results``: mutant -> its results.json (a path or the parsed document)."""
    return {name: failing_codes(_document(source)) for name, source in sorted(results.items())}


def killed_by(row: Mapping[str, list[str]], expected: frozenset[str] | set[str]) -> list[str]:
    """The checks that reported one of the expected codes."""
    return [check for check, codes in row.items() if expected & set(codes)]


def write_matrix(
    path: str | Path,
    matrix: Matrix,
    expected: Mapping[str, frozenset[str] | set[str]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Write the matrix as JSON; with ``expected`` (mutant -> codes), say which were killed."""
    expected = expected or {}
    mutants = {}
    for name, row in matrix.items():
        want = frozenset(expected.get(name, ()))
        mutants[name] = {
            "expected_codes": sorted(want),
            "killed": bool(killed_by(row, want)),
            "killed_by": killed_by(row, want),
            "checks": row,
        }
    document = {"schema": 1, **extra, "mutants": mutants}
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return document


def diagnosis_scores(
    runs: Mapping[str, Sequence[Mapping[str, Any]] | Mapping[str, Any]],
    expected: Mapping[str, frozenset[str] | set[str]],
) -> dict[str, Any]:
    """The diagnosis benchmark over finished runs.

    ``runs``: mutant -> its results (the ``results`` list of results.json, or the whole
    document); ``expected``: mutant -> the codes it must get. A mutant is *detected* when a
    failing result carries one of its codes, and *diagnosed* when the run's top-ranked root
    cause (``tck.reports.causes.top_cause``) is one of them. Returns per-mutant rows,
    ``detection_rate`` and ``accuracy`` (shares of all mutants, 0..1) and the misses.
    """
    from tck.reports.causes import top_cause

    rows: dict[str, dict[str, Any]] = {}
    for name, run in sorted(runs.items()):
        results = run["results"] if isinstance(run, Mapping) else run
        want = frozenset(expected.get(name, ()))
        codes = {
            (r.get("diagnosis") or {}).get("code", "")
            for r in results
            if r.get("status") in ("fail", "error")
        }
        top = top_cause(results)
        rows[name] = {
            "expected_codes": sorted(want),
            "detected": bool(want & codes),
            "top_cause": top,
            "diagnosed": top in want,
        }
    n = len(rows)
    return {
        "mutants": rows,
        "count": n,
        "detection_rate": sum(r["detected"] for r in rows.values()) / n if n else 0.0,
        "accuracy": sum(r["diagnosed"] for r in rows.values()) / n if n else 0.0,
        "undetected": [name for name, r in rows.items() if not r["detected"]],
        "misdiagnosed": {name: r["top_cause"] for name, r in rows.items() if not r["diagnosed"]},
    }


def format_scores(scores: Mapping[str, Any]) -> str:
    """One line for logs: detection rate and top-cause accuracy, then the misses."""
    line = (
        f"diagnosis benchmark: {scores['count']} mutants, detection "
        f"{100 * scores['detection_rate']:.1f}%, top-cause accuracy {100 * scores['accuracy']:.1f}%"
    )
    if scores["undetected"]:
        line += f"; undetected: {', '.join(scores['undetected'])}"
    if scores["misdiagnosed"]:
        line += "; misdiagnosed: " + ", ".join(
            f"{name} (top cause {cause})" for name, cause in scores["misdiagnosed"].items()
        )
    return line


def main(argv: list[str]) -> int:
    if len(argv) < 2 or any("=" not in a for a in argv[1:]):
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    from . import expected_codes

    sources = dict(a.split("=", 1) for a in argv[1:])
    matrix = build_matrix(sources)
    expected = {}
    for name in matrix:
        try:
            expected[name] = expected_codes(name)
        except KeyError:
            expected[name] = frozenset()
    write_matrix(argv[0], matrix, expected)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
