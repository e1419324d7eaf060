"""Root causes (issue 19): name the bug behind an exception, and group a run's failures by
their most specific explanation.

A run's failures are symptoms; several usually share one cause (an Annotated-Transformer
LayerNorm fails the oracle comparison, the fixtures, three probes and the gradients). The
reports lead with the cause (``root_causes``), most specific first, and list the symptoms
under it. A generic code (``*.oracle_mismatch``, ``*.assertion``, ``adapter.exception``) is a
cause of its own only when nothing more specific fits the same subject.

Some implementation bugs surface as exceptions, not as wrong numbers; ``named_exception``
gives those a code and plain words instead of a bare ``adapter.exception``:

- a fill value that the dtype cannot hold (``masked_fill(mask, -1e9)`` in float16 raises
  "value cannot be converted to type c10::Half without overflow"):
  ``numerics.fill_value_overflow``;
- hypothesis' ``FlakyFailure`` (an example failed, then passed when replayed): the subject
  carries state from one call to the next, ``state.leaks_between_calls``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from tck.reports.text import safe_str

from .harness import convention_code

# Codes that only say *that* something is wrong: a cause only when nothing else fits.
GENERIC_SUFFIXES = (".oracle_mismatch", ".fixture_mismatch", ".assertion")
GENERIC_CODES = frozenset({"adapter.exception", "adapter.build_failed", "skip", ""})
# Codes that describe what a wrong number does rather than why: ranked below a convention,
# a precision finding or a named exception, above a bare oracle mismatch.
SYMPTOM_CODES = frozenset(
    {
        "mask.ignored",
        "mask.masked_key_gradient",
        "layer_norm.not_centred",
        "layer_norm.not_shift_invariant",
        "layer_norm.wrong_statistics",
        "positional.not_relative",
        "rope.not_relative",
        "positional.frequency_wrong",
        "attention.softmax_rows_sum_to_one",
    }
)

# Causes that make every other observation of the run unreliable (the output depends on
# earlier calls, or on chance): ranked above the rest.
OVERRIDING_CODES = frozenset({"state.leaks_between_calls", "dropout.active_in_eval"})

_OVERFLOW = re.compile(r"value cannot be converted to type (\S+) without overflow")


def named_exception(error: BaseException, dtype: str | None = None) -> tuple[str, str] | None:
    """(code, message) for an exception that names an implementation bug, else None."""
    text = f"{type(error).__name__}: {safe_str(error)}"
    match = _OVERFLOW.search(text)
    if match:
        where = f" in {dtype}" if dtype else ""
        return (
            "numerics.fill_value_overflow",
            f"a fill value does not fit the dtype{where}: a constant such as masked_fill(mask, "
            "-1e9) or -1e4 is beyond the range of the tensor's type (float16 holds +-65504), "
            f"so torch refuses it ({match.group(0)}). Fill with torch.finfo(dtype).min or "
            f"-inf instead. [{text[:300]}]",
        )
    flaky = _flaky(error)
    if flaky is not None:
        inner = "; ".join(f"{type(e).__name__}: {safe_str(e)[:200]}" for e in flaky) or "-"
        return (
            "state.leaks_between_calls",
            "the same example failed and then passed when hypothesis replayed it "
            "(FlakyFailure): the subject carries state from one call to the next (a cached "
            "mask or table, a buffer updated in forward, a counter, an RNG that is not "
            f"reset), so its output depends on what it was called with before. First run: "
            f"{inner}",
        )
    return None


def _flaky(error: BaseException) -> list[BaseException] | None:
    try:
        from hypothesis.errors import Flaky
    except ImportError:  # pragma: no cover - hypothesis is a dependency
        return None
    if not isinstance(error, Flaky):
        return None
    return list(getattr(error, "exceptions", ()) or ())


def is_generic(code: str) -> bool:
    return code in GENERIC_CODES or code.endswith(GENERIC_SUFFIXES)


def specificity(code: str) -> int:
    """Higher is more specific: state carried between calls or randomness in eval 3 (they
    make every other observation unreliable), a named cause 2, a symptom 1, a generic 0."""
    if code in OVERRIDING_CODES:
        return 3
    if is_generic(code):
        return 0
    if code in SYMPTOM_CODES:
        return 1
    return 2


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
                joined.setdefault((r["subject"], convention_code(field, value)), lead)
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
