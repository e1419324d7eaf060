"""Root causes (issue 19): group a run's failures by their most specific explanation.

A run's failures are symptoms; several usually share one cause (an Annotated-Transformer
LayerNorm fails the oracle comparison, the fixtures, three probes and the gradients). The
reports lead with the cause (``root_causes``), most specific first, and list the symptoms
under it. A generic code (``*.oracle_mismatch``, ``*.assertion``, ``adapter.exception``) is a
cause of its own only when nothing more specific fits the same subject. How specific a code
is comes from its rank class in the registry of codes (``tck.reference.codes``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tck.reference.catalogue import convention_code
from tck.reference.codes import SPECIFICITY, rank


def is_generic(code: str) -> bool:
    """Does ``code`` say only that something is wrong (rank class ``generic``)?"""
    return rank(code) == "generic"


def specificity(code: str) -> int:
    """Higher is more specific: state carried between calls or randomness in eval 3 (they
    make every other observation unreliable), a named cause 2, a symptom 1, a generic 0."""
    return SPECIFICITY[rank(code)]


def root_causes(results: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The failing results (fail and error) grouped by cause, most specific cause first.

    Each failing result joins the group of its own code when that code is specific; a
    generic or symptom code joins the most specific cause found on the same subject (the
    oracle mismatch of an encoder layer whose LayerNorm probe named unbiased variance is a
    symptom of that variance), and stands as its own cause only when its subject has none.
    Returns ``[{"code", "message", "subjects", "symptoms": [{check, subject, code,
    message}], "specificity"}]``: the symptoms include the results that carry the cause's
    code themselves.
    """
    failing = [r for r in results if r.get("status") in ("fail", "error")]
    # Several conventions explained at once (an Annotated-Transformer LayerNorm): the codes of
    # its fields are one cause, led by the code of the result that found the combination.
    joined: dict[tuple[str, str], tuple[str, str]] = {}  # (subject, code) -> cause
    for r in failing:
        together = (r.get("metrics") or {}).get("explained_by")
        if isinstance(together, Mapping) and len(together) > 1:
            diagnosis = r.get("diagnosis") or {}
            lead = (diagnosis.get("code", ""), diagnosis.get("message", ""))
            for field, value in together.items():
                try:
                    joined.setdefault((r["subject"], convention_code(field, value)), lead)
                except KeyError:  # a field or value this version's catalogue lacks
                    continue
            joined.setdefault((r["subject"], lead[0]), lead)
    best: dict[str, tuple[int, int, str, str]] = {}  # subject -> (rank, -order, code, msg)
    counts: dict[tuple[str, str], int] = {}
    for r in failing:
        code = (r.get("diagnosis") or {}).get("code", "")
        counts[(r["subject"], code)] = counts.get((r["subject"], code), 0) + 1
    for order, r in enumerate(failing):
        diagnosis = r.get("diagnosis") or {}
        code = diagnosis.get("code", "")
        # Most specific; among equals, the code most results of the subject share; then
        # the first reported.
        key = (specificity(code), counts[(r["subject"], code)], -order)
        if r["subject"] not in best or key > best[r["subject"]][:3]:
            best[r["subject"]] = (*key, code, diagnosis.get("message", ""))
    groups: dict[str, dict[str, Any]] = {}
    for r in failing:
        diagnosis = r.get("diagnosis") or {}
        code = diagnosis.get("code", "")
        rank, _, _, top, top_message = best[r["subject"]]
        cause, message = (code, diagnosis.get("message", ""))
        if specificity(code) < rank:
            cause, message = top, top_message
        cause, message = joined.get((r["subject"], cause), (cause, message))
        group = groups.setdefault(
            cause,
            {
                "code": cause,
                "message": message,
                "specificity": specificity(cause),
                "subjects": [],
                "symptoms": [],
            },
        )
        if r["subject"] not in group["subjects"]:
            group["subjects"].append(r["subject"])
        group["symptoms"].append(
            {
                "index": r.get("index"),
                "check": r.get("check", ""),
                "subject": r["subject"],
                "code": code,
                "status": r.get("status"),
                "message": diagnosis.get("message", ""),
            }
        )
    return sorted(
        groups.values(), key=lambda g: (-g["specificity"], -len(g["symptoms"]), g["code"])
    )


def top_cause(results: Iterable[Mapping[str, Any]]) -> str | None:
    """The code of the run's first root cause (the diagnosis benchmark's answer)."""
    causes = root_causes(results)
    return causes[0]["code"] if causes else None
