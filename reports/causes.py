"""Root causes: group a run's failures by their most specific explanation.

A run's failures are symptoms; several usually share one cause (an Annotated-Transformer
LayerNorm fails the oracle comparison, the fixtures, three probes and the gradients). The
reports lead with the cause (``root_causes``), most specific first, and list the symptoms
under it. A generic code (``*.oracle_mismatch``, ``*.assertion``, ``adapter.exception``) is a
cause of its own only when nothing more specific fits the same subject. How specific a code
is comes from its rank class in the registry of codes (``tck.reference.codes``).

The order is one a user can act on (docs/diagnosis.md):

1. under ``--baseline``, the causes with a new failure before those the baseline already had;
2. a cause whose only evidence is a hypothesis that fits a 16-bit comparison after every
   cause with other evidence (a bfloat16 bound is loose enough for a wrong hypothesis to fit);
3. more specific before less (the code's rank class);
4. the strength of the evidence: an explanation that reproduces the failing output at the
   comparison's own precision, then one that reproduces it at float32's only, then a
   property's finding; this comes before the number of failing rows, so a cause that
   reproduces the output exactly beats one that fits more rows;
5. a forward finding before the gradient one it causes;
6. the cause found on the smallest component before one found on a component built from it
   (the component record's level: an op, a layer, a stack, a model): a bug in an op makes
   every layer, stack and model using it fail too, with findings of their own (a norm whose
   statistics span the sequence leaks the future through a decoder block: the block's
   causal-leak finding is a consequence), so the count of failing rows, which grows with
   every composite, only breaks the remaining ties.

A self-consistency cause (a code that names a violation of the decoding regimes, SPEC.md
§11.6 to §11.9) on a subject whose plain forward also fails with a named cause comes after
the forward's causes, whatever its rank: those checks compare the subject with itself on a
rearranged sequence (cached steps against the full forward, §11.6; a left-padded row
against the row alone, §11.7; a row in a batch of different lengths against the row alone,
§11.8; chunked calls, §11.9), so a wrong forward (a causal leak, a norm over the sequence)
makes them disagree too, and lets a cache hypothesis fit the difference by accident; the
forward's own cause is the one to fix. A named cause that a cached check found itself (the
keys a cached query sees, measured: a window too narrow) says nothing about the forward and
demotes nothing. (A batch's rows mixing, §10.2, is no such
consequence: a wrong forward of one row does not make rows interact.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tck.reference.catalogue import convention_code
from tck.reference.codes import SPECIFICITY, lookup, rank
from tck.reference.components import LEVELS, RECORDS


def is_generic(code: str) -> bool:
    """Does ``code`` say only that something is wrong (rank class ``generic``)?"""
    return rank(code) == "generic"


def specificity(code: str) -> int:
    """Higher is more specific: state carried between calls or randomness in eval 3 (they
    make every other observation unreliable), a named cause 2, a symptom 1, a generic 0."""
    return SPECIFICITY[rank(code)]


def reproduced(result: Mapping[str, Any]) -> bool:
    """Did an explanation reproduce the result's output
    (``tck.conformance.diagnosis.explain`` records
    the code of the hypothesis under which the oracle gives the implementation's output)?
    Such a finding is stronger evidence than a property's: a leak across the causal diagonal
    follows from a mask added to the scores, not the reverse."""
    code = (result.get("diagnosis") or {}).get("code", "")
    return bool(code) and (result.get("metrics") or {}).get("reproduced_by") == code


def evidence(result: Mapping[str, Any]) -> int:
    """How strongly a result supports its code: 3 an explanation reproduced the output at
    the comparison's own precision, 2 at float32's only (a float64 subject's retry), 1 any
    other finding (and a fit on a call where the hypothesis hides every key: a degenerate
    call), 0 a hypothesis that fits only a 16-bit comparison, or a cause read from the words
    of an exception rather than measured (``metrics.inferred_from``: a concatenation that
    does not fit suggests a cache grown along another axis; a measured cause of the same
    rank is the one to fix first)."""
    metrics = result.get("metrics") or {}
    if metrics.get("inferred_from") == "exception":
        return 0
    if reproduced(result) and metrics.get("degenerate_fit") == metrics.get("reproduced_by"):
        # reproduced only where every key is hidden (tck.conformance.diagnosis.hypotheses_masks)
        return 1
    if reproduced(result):
        at = metrics.get("reproduced_at")  # None: recorded before this distinction
        return 3 if at is None or at == (metrics.get("dtype") or "float64") else 2
    return 0 if weak(result) else 1


def weak(result: Mapping[str, Any]) -> bool:
    """Is the result's diagnosis a hypothesis that fits only a 16-bit comparison?"""
    return bool((result.get("metrics") or {}).get("fit_only_in"))


def known(result: Mapping[str, Any]) -> bool:
    """Did the ``--baseline`` run already have this failure
    (``tck.conformance.runner.baseline``)?"""
    return result.get("baseline") == "known"


def _strength(result: Mapping[str, Any]) -> int:
    """The rank class of a result's code, a reproduced symptom counted as a cause (the mask
    that the oracle without it reproduces is the cause, whatever else it also describes)."""
    code = (result.get("diagnosis") or {}).get("code", "")
    strength = specificity(code)
    if reproduced(result) and not is_generic(code):
        strength = max(strength, SPECIFICITY["cause"])
    return strength


def level(result: Mapping[str, Any]) -> int:
    """The position of the result's component in the record's LEVELS (0 an op, 3 a model);
    past the end for a component the record lacks (an adapter's own subject)."""
    found = RECORDS.get(str(result.get("component") or result.get("subject") or ""))
    return LEVELS.index(found.level) if found is not None else len(LEVELS)


# The SPEC clauses of the decoding regimes, whose checks compare a subject with itself on a
# rearranged sequence: cached decoding, left padding, rows of different lengths, chunks.
SELF_CONSISTENCY_CLAUSES = ("11.6", "11.7", "11.8", "11.9")


def self_consistency(code: str) -> bool:
    """Does ``code`` name a violation of a decoding regime (its registry clauses include one
    of ``SELF_CONSISTENCY_CLAUSES``)?"""
    found = lookup(code)
    return found is not None and any(c in SELF_CONSISTENCY_CLAUSES for c in found.clauses)


# The clauses of the checks that decode with a cache (cached steps, chunked calls, a forward
# after steps): what they measure (the keys a cached query sees: a window too narrow) is a
# finding about the cached path, never evidence that the plain forward is wrong.
CACHED_CLAUSES = ("11.6", "11.9")


def cached_check(result: Mapping[str, Any]) -> bool:
    """Was ``result`` found by a check that decodes with a cache (its clauses include one of
    ``CACHED_CLAUSES``)?"""
    return any(str(c) in CACHED_CLAUSES for c in result.get("clause") or ())


def padded_cached(result: Mapping[str, Any]) -> bool:
    """Was ``result`` found decoding padded rows with a cache? Where the same subject's plain
    forward fails too, its cause is read through the padding bug, not a cache's."""
    return cached_check(result) and bool((result.get("metrics") or {}).get("padded_call"))


# A finding that a cause's own mechanism produces, on the same subject or (failing that) on
# another subject of the run, which shares the implementation's code: it joins that cause
# instead of standing as one. A softmax written as exp(s) / sum(exp(s)) without subtracting
# the row maximum overflows at large scores (numerics.overflow) and, at a row whose keys are
# all masked (every score at the fill value), gives 0 / 0: the NaN a fully-masked-row probe
# reads as the 'nan' convention (SPEC.md §4.4) is the same missing max subtraction, and
# declaring fully_masked_rows='nan' would hide the bug.
CONSEQUENCES: dict[str, tuple[str, ...]] = {
    # ... and a float64 fill (finfo(float64).min) cast into a float32 step overflows to -inf:
    # a row of -inf is the same 0 / 0
    "mask.fully_masked_rows_nan": ("numerics.overflow", "numerics.float32_island"),
    # a mask that never reaches the scores accepts any shape, and leaves a masked key's
    # gradient non-zero
    "shape.accepts_bad_mask": ("mask.ignored",),
    "mask.masked_key_gradient": ("mask.ignored", "mask.added_as_bias", "mask.polarity_inverted"),
    # a mask that hides the wrong keys leaves some query rows with none (a causal mask read
    # transposed, where a padded query sees only later pads; the diagonal hidden, where the
    # first query sees nothing): 0 / 0 there, and the NaN spreads through the next layers
    "numerics.overflow": (
        "mask.causal_leak",
        "mask.polarity_inverted",
        "mask.causal_diagonal_hidden",
    ),
}


def _consequence_of(
    code: str, subject: str, present: Mapping[tuple[str, str], str]
) -> tuple[str, str] | None:
    """(subject, cause) of the cause whose mechanism produces the finding ``code``
    (``CONSEQUENCES``): found on ``subject`` itself, else on another subject of the run (the
    attention that overflows at large scores is where the model's padded rows turn 0 / 0;
    the stress that shows the overflow may run on the attention alone). ``present``:
    (subject, code) -> message."""
    for cause in CONSEQUENCES.get(code, ()):
        if (subject, cause) in present:
            return subject, cause
    for cause in CONSEQUENCES.get(code, ()):
        found = next((key for key in present if key[1] == cause), None)
        if found is not None:
            return found
    return None


def _generic_order(code: str) -> int:
    """Among codes of one rank: a gradient disagreement follows from a forward one (and is
    ranked below it), a component's own code above the family codes ``*.assertion``.
    Codes that are not generic are not ordered here."""
    if not is_generic(code):
        return 2
    if code.startswith("gradients."):
        return 0
    if code.startswith(("adapter.", "equality.")) or code.endswith(".assertion"):
        return 1
    return 2


def root_causes(results: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The failing results (fail and error) grouped by cause, most specific cause first.

    Each failing result joins the group of its own code when that code is specific; a
    generic or symptom code joins the most specific cause found on the same subject (the
    oracle mismatch of an encoder layer whose LayerNorm probe named unbiased variance is a
    symptom of that variance), and stands as its own cause only when its subject has none.
    Returns ``[{"code", "message", "subjects", "symptoms": [{check, subject, code,
    message}], "specificity", "reproduced", "evidence", "weak", "known", "level"}]`` in the
    order of the module docstring: the symptoms include the results that carry the cause's
    code themselves; ``evidence`` is the strongest of its results' (``evidence``), ``weak``
    says that every result is a 16-bit fit alone, ``known`` that the baseline had them all,
    ``level`` is the lowest of its results' (``level``).
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
    best: dict[str, tuple[int, ...]] = {}  # subject -> (key..., code, msg)
    counts: dict[tuple[str, str], int] = {}
    for r in failing:
        code = (r.get("diagnosis") or {}).get("code", "")
        counts[(r["subject"], code)] = counts.get((r["subject"], code), 0) + 1
    for order, r in enumerate(failing):
        diagnosis = r.get("diagnosis") or {}
        code = diagnosis.get("code", "")
        # Not a 16-bit fit alone; most specific; among equals, the strongest evidence, a
        # forward finding before a gradient's, the code most results of the subject share;
        # then the first reported.
        key = (
            int(not weak(r)),
            _strength(r),
            evidence(r),
            _generic_order(code),
            counts[(r["subject"], code)],
            -order,
        )
        if r["subject"] not in best or key > best[r["subject"]][:6]:
            best[r["subject"]] = (*key, code, diagnosis.get("message", ""))
    strength: dict[str, int] = {}  # code -> its strongest rank in this run
    won: set[str] = set()  # codes some result reproduced on a call where queries see keys
    for r in failing:
        code = (r.get("diagnosis") or {}).get("code", "")
        strength[code] = max(strength.get(code, 0), _strength(r))
        if reproduced(r) and evidence(r) > 1:  # a degenerate fit is a property's finding
            won.add(code)
    # Subjects whose plain forward fails with a named cause (not a self-consistency one, not
    # a generic code, not found by a check that decodes with a cache): their
    # self-consistency findings are consequences (module docstring).
    forward_fails = {
        r["subject"]
        for r in failing
        if (code := (r.get("diagnosis") or {}).get("code", ""))
        and not is_generic(code)
        and not self_consistency(code)
        and not cached_check(r)
    }
    # Subjects with any failing plain forward (generic codes too): a cache cause seen only on
    # padded rows there may be the padding bug seen through the cache (rows packed wrong).
    plain_fails = {r["subject"] for r in failing if not cached_check(r)}
    present: dict[tuple[str, str], str] = {}  # (subject, code) -> the first message
    for r in failing:
        diagnosis = r.get("diagnosis") or {}
        present.setdefault((r["subject"], diagnosis.get("code", "")), diagnosis.get("message", ""))
    groups: dict[str, dict[str, Any]] = {}
    padded_only: dict[str, bool] = {}  # cause -> every result found on padded cached rows
    for r in failing:
        diagnosis = r.get("diagnosis") or {}
        code = diagnosis.get("code", "")
        solid, rank, _, _, _, _, top, top_message = best[r["subject"]]
        top_producer = _consequence_of(top, r["subject"], present)
        if top_producer is not None:  # the subject's best finding is another's consequence
            top, top_message = top_producer[1], present[top_producer]
        cause, message = (code, diagnosis.get("message", ""))
        producer = _consequence_of(code, r["subject"], present)
        if producer is not None:
            cause, message = producer[1], present[producer]
        # A weaker code, or a generic one beside another of the same subject, is a symptom
        # of the subject's best cause (a 16-bit fit takes no failure of other evidence).
        if (_strength(r) < rank or (is_generic(code) and code != top)) and solid >= int(
            not weak(r)
        ):
            cause, message = top, top_message
        cause, message = joined.get((r["subject"], cause), (cause, message))
        group = groups.setdefault(
            cause,
            {
                "code": cause,
                "message": message,
                "specificity": strength.get(cause, specificity(cause)),
                "reproduced": cause in won,
                "evidence": 0,
                "weak": True,
                "known": True,
                "level": len(LEVELS),
                "subjects": [],
                "symptoms": [],
            },
        )
        group["level"] = min(group["level"], level(r))
        if r["subject"] not in group["subjects"]:
            group["subjects"].append(r["subject"])
        group["evidence"] = max(group["evidence"], evidence(r))
        group["weak"] = group["weak"] and weak(r)
        group["known"] = group["known"] and known(r)
        if code == cause:  # the results that found the cause, not those joined to it
            padded_only[cause] = padded_only.get(cause, True) and padded_cached(r)
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

    def read_through_the_forward(g: dict[str, Any]) -> bool:
        """A finding that may be a failing forward's seen another way: a self-consistency
        cause where the forward fails, a cache cause seen on padded rows only where the
        padded forward fails."""
        subjects = g["subjects"]
        if self_consistency(g["code"]) and all(s in forward_fails for s in subjects):
            return True
        return padded_only.get(g["code"], False) and all(s in plain_fails for s in subjects)

    return sorted(
        groups.values(),
        key=lambda g: (
            int(g["known"]),
            int(g["weak"]),
            int(read_through_the_forward(g)),
            -g["specificity"],
            -int(g["reproduced"]),
            -g["evidence"],
            -_generic_order(g["code"]),
            g["level"],
            -len(g["symptoms"]),
            g["code"],
        ),
    )


def top_cause(results: Iterable[Mapping[str, Any]]) -> str | None:
    """The code of the run's first root cause (the diagnosis benchmark's answer)."""
    causes = root_causes(results)
    return causes[0]["code"] if causes else None
