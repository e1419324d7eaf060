"""§10.10 What half precision breaks, named: the findings of the numerics checks.

A comparison in float16 or bfloat16 that fails where the same call in float64 passes is a
precision bug. This module names the quantity the implementation formed in too low a
precision, by testing hypotheses against the careful run of ``tck.reference.model``
(which keeps norm statistics and the softmax in float32 and RoPE angles in float64) with one
quantity at a time switched back to the input dtype (``computed_in_input_dtype``):

- ``numerics.overflow``: the output is inf or NaN where the oracle is finite (a square, an
  exponential or a sum beyond float16's 65504); the message names the quantity when one of
  the hypotheses reproduces the non-finite positions;
- ``numerics.norm_statistics_low_precision``: mean, variance or mean square in the input
  dtype (``(x - mean)**2`` overflows float16 once ``|x - mean| > 256``);
- ``numerics.softmax_low_precision``: the softmax's exponentials and their sum in the input
  dtype (the sum of a row of scores near 10 is past 65504: every weight becomes 0);
- ``numerics.rope_angles_low_precision``: the angle ``pos * w`` formed from 16-bit
  positions and frequencies (bfloat16 cannot hold 257, float16 not 4097);
- ``numerics.norm_variance_cancels``: a LayerNorm's variance cancels against a row mean
  large beside the row's spread (one pass, ``E[x^2] - E[x]^2``): the failing rows, each less
  its own mean, meet the oracle (a LayerNorm is shift-invariant, SPEC.md §5.1), so nothing
  but the mean's size was wrong. Tried before the others (``variance_cancels``), in any
  dtype (float64 cancels too, on rows of tiny spread): in float32 it is the only account of a
  norm's failure, since the careful run forms the statistics in float32 too;
- ``numerics.precision_loss``: none of these explains it.

A hypothesis explains an output when it agrees with it by the tolerance rule of the failed
comparison (the same dtype, ``k`` and careful run error). Where none does, a single
norm or RoPE, whose only quantity formed in reduced precision is its statistics or its
angles, is named by that quantity.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tck.adapters import Unsupported
from tck.conformance.toolkit import careful as careful_run
from tck.conformance.toolkit.harness import Harness, Instance
from tck.conformance.toolkit.results import CheckFailure
from tck.reference import RECORDS, record
from tck.reference.codes import code
from tck.reference.tolerance import compare, k_forward, round_to
from tck.reference.variants import reaches

# The quantities each component forms (SPEC.md §10.10), in the order hypotheses are tried;
# a component not listed here (a new one) is tried against all of them.
ALL = ("norm_statistics", "softmax", "rope_angles")
QUANTITIES_OF: dict[str, tuple[str, ...]] = {
    name: rec.quantities for name, rec in RECORDS.items() if rec.quantities is not None
}
# A component whose only reduced-precision quantity is this one, and no matmul besides (no
# FLOP formula, §10.4): a dtype-specific failure of it can only be that quantity.
_ONLY = {
    name: rec.quantities[0]
    for name, rec in RECORDS.items()
    if rec.cost is None and rec.quantities is not None and len(rec.quantities) == 1
}

CODES = {
    q: code(f"numerics.{q}_low_precision") for q in ("norm_statistics", "softmax", "rope_angles")
}
VARIANCE_CANCELS = code("numerics.norm_variance_cancels")
# A row's mean is "large beside its spread" past this ratio: there a one-pass variance in
# float32 keeps under 1e-7 * ratio^2 of its value, 1e-5 at ten (the suite's low-variance rows
# have ratios of 5 to 5000, its large-mean rows 1e4).
MEAN_OVER_SPREAD = 10.0
OVERFLOW = "numerics.overflow"
PRECISION_LOSS = "numerics.precision_loss"
DECLARED = "numerics.half_precision_input_dtype"

WORDS = {
    "norm_statistics": "forms the norm statistics (mean, variance, mean square) in {dtype} "
    "instead of float32",
    "softmax": "forms the softmax's exponentials and their sum in {dtype}, where the careful "
    "reference subtracts the row maximum and sums in float32",
    "rope_angles": "forms the RoPE angles pos * w from {dtype} positions and frequencies "
    "instead of in float32 or better",
}


# What each quantity is, in words (the findings of a step pinned to a dtype).
QUANTITY_WORDS = {
    "norm_statistics": "the norm statistics (mean, variance, mean square)",
    "softmax": "the softmax's exponentials and their sum",
    "rope_angles": "the RoPE angles pos * w",
}


def hypothesis(
    tck: Harness, inst: Instance, inputs: Mapping[str, np.ndarray], *quantities: str
) -> np.ndarray:
    """The torch reference in ``inst.dtype`` with ``quantities`` formed in that dtype."""
    from tck.reference.model import computed_in_input_dtype

    with computed_in_input_dtype(*quantities):
        return careful_run.careful(tck, inst, inputs)


def name_precision_failure(
    tck: Harness,
    inst: Instance,
    inputs: Mapping[str, np.ndarray],
    failure: CheckFailure,
) -> CheckFailure:
    """The named finding for ``failure``, a dtype-specific mismatch (float64 matches), once
    ``variance_cancels`` has not named it."""
    try:
        test = np.asarray(tck.run(inst, inputs), dtype=np.float64)
    except Unsupported:
        return failure
    gold = tck.gold(inst, inputs)
    if test.shape != gold.shape:
        return failure
    careful = careful_run.careful(tck, inst, inputs)
    ignore = tck.ignore_mask(inst, gold)
    careful_err = float(np.abs(np.where(np.isfinite(careful - gold), careful - gold, 0.0)).max())
    k = k_forward(tck.component)
    considered = np.ones(gold.shape, bool) if ignore is None else ~ignore
    # Non-finite where the oracle is finite is an overflow whether or not the careful run
    # overflowed too: an overflowing yardstick excuses nothing (SPEC.md §10.7).
    overflow = considered & np.isfinite(gold) & ~np.isfinite(test)
    shared = int((overflow & ~np.isfinite(careful)).sum())
    explained = None
    for quantity in QUANTITIES_OF.get(tck.component, ALL):
        try:
            other = hypothesis(tck, inst, inputs, quantity)
        except (RuntimeError, ValueError):
            continue
        if _same(other, careful):  # the quantity plays no part in this call
            continue
        if _explains(test, other, gold, inst.dtype, careful_err, k, ignore):
            explained = quantity
            break
    dtype = inst.dtype
    if overflow.any():
        first = tuple(int(i) for i in np.argwhere(overflow)[0])
        how = f"; it {WORDS[explained].format(dtype=dtype)}, and that is where" if explained else ""
        careful_too = (
            f" ({shared} of them overflow in the careful run too: the inputs leave {dtype}'s "
            "range even when computed carefully, and the float64 oracle is finite there)"
            if shared
            else " (the careful run is finite there)"
        )
        return CheckFailure(
            OVERFLOW,
            f"{int(overflow.sum())} output position(s) are inf or NaN in {dtype} where the "
            f"oracle is finite{careful_too} (first at {first}): an intermediate "
            f"left {dtype}'s range{how} "
            f"(SPEC.md §10.10); {failure.message}",
            {
                **failure.metrics,
                "overflow_positions": int(overflow.sum()),
                "careful_overflow_positions": shared,
            },
        )
    quantity = explained or _ONLY.get(tck.component)
    if quantity is None:
        return CheckFailure(
            PRECISION_LOSS,
            f"{failure.message}; the same call in float64 matches the oracle, so the error "
            f"comes from computing in {dtype} less carefully than the careful run "
            "(SPEC.md §10.10)",
            failure.metrics,
        )
    evidence = (
        "the careful run with that one quantity in the input dtype reproduces the output"
        if explained
        else "the same call in float64 matches the oracle"
    )
    return CheckFailure(
        CODES[quantity],
        f"it {WORDS[quantity].format(dtype=dtype)} ({evidence}; SPEC.md §10.10); {failure.message}",
        {**failure.metrics, "quantity": quantity},
    )


def variance_cancels(
    tck: Harness, inst: Instance, inputs: Mapping[str, np.ndarray], failure: CheckFailure
) -> CheckFailure | None:
    """``failure`` named ``numerics.norm_variance_cancels`` where it is that: the subject
    centres its input with a LayerNorm first (a norm, or a pre-LN layer or stack), some rows
    of ``x`` have a mean over ``MEAN_OVER_SPREAD`` times their spread, and the same rows
    less their own means meet the oracle in the same dtype. None otherwise."""
    x = inputs.get("x")
    if x is None or not reaches(tck.component, "layer_norm"):
        return None
    fields = record(tck.component).fields
    conventions = inst.conventions
    if conventions.norm_kind != "layer_norm":
        return None
    if "norm_placement" in fields and conventions.norm_placement != "pre":
        return None  # post-LN: attention meets the mean before any norm removes it
    x = np.asarray(x, dtype=np.float64)
    mean, spread = x.mean(-1, keepdims=True), x.std(-1, keepdims=True)
    ratio = float(np.max(np.abs(mean) / np.maximum(spread, np.finfo(np.float64).tiny)))
    if ratio <= MEAN_OVER_SPREAD:
        return None
    centred = {**inputs, "x": round_to(x - mean, inst.dtype)}
    try:
        test = np.asarray(tck.run(inst, centred), dtype=np.float64)
        gold = tck.gold(inst, centred)
        bound_by = None if inst.dtype == "float64" else careful_run.careful(tck, inst, centred)
        result = tck.compare(inst, test, gold, careful=bound_by, inputs=centred)
    except (Unsupported, CheckFailure):
        return None
    if not result.passed:
        return None
    return CheckFailure(
        VARIANCE_CANCELS,
        f"the norm's variance cancels against the row mean: rows whose mean is up to "
        f"{ratio:.3g} times their spread fail, and the same rows less their own means meet the "
        f"oracle in {inst.dtype} (max |test - oracle| {result.max_abs_err:.3g}, ratio "
        f"{result.ratio:.3g}); a LayerNorm is shift-invariant, so the statistics lose the "
        "spread to the mean: a one-pass E[x^2] - E[x]^2 (flax's use_fast_variance) where the "
        f"mean of (x - mean)^2 is needed (SPEC.md §5.1, §10.10); {failure.message}",
        {**failure.metrics, "mean_over_spread": ratio},
    )


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


def _explains(
    test: np.ndarray,
    other: np.ndarray,
    gold: np.ndarray,
    dtype: str,
    careful_err: float,
    k: float,
    ignore: np.ndarray | None,
) -> bool:
    """Does ``other`` (a hypothesis) reproduce ``test``, non-finite positions included?"""
    if other.shape != test.shape:
        return False
    if not np.array_equal(~np.isfinite(test), ~np.isfinite(other)):
        return False
    finite = np.isfinite(test)
    skip = ~finite if ignore is None else (~finite | ignore)
    if not compare(test, other, dtype=dtype, careful_err=careful_err, k=k, ignore=skip).passed:
        return False
    # and it must be the better explanation: closer to the output than the oracle is
    keep = ~skip & np.isfinite(gold)
    to_other = float(np.abs(np.where(keep, test - other, 0.0)).max(initial=0.0))
    to_gold = float(np.abs(np.where(keep, test - gold, 0.0)).max(initial=0.0))
    return to_other < to_gold or not keep.any()


def declared_input_dtype(
    tck: Harness, inst: Instance, inputs: Mapping[str, np.ndarray], failure: CheckFailure
) -> bool:
    """For a subject declaring ``half_precision="input_dtype"``: does it pass the rule against
    the naive run (every quantity in the input dtype)? Then record the convention row
    and return True; the failure stands otherwise."""
    if inst.conventions.half_precision != "input_dtype" or inst.dtype not in (
        "float16",
        "bfloat16",
    ):
        return False
    try:
        test = np.asarray(tck.run(inst, inputs), dtype=np.float64)
    except Unsupported:
        return False
    gold = tck.gold(inst, inputs)
    quantities = QUANTITIES_OF.get(tck.component, ALL)
    naive = hypothesis(tck, inst, inputs, *quantities)
    if test.shape != gold.shape or naive.shape != gold.shape:
        return False
    ignore = tck.ignore_mask(inst, gold)
    lost = np.isfinite(gold) & ~np.isfinite(naive)  # where the naive run overflowed
    skip = lost if ignore is None else (lost | ignore)
    careful_err = float(np.abs(np.where(~skip & np.isfinite(naive), naive - gold, 0.0)).max())
    k = k_forward(tck.component)
    if not compare(test, gold, dtype=inst.dtype, careful_err=careful_err, k=k, ignore=skip).passed:
        return False
    tck.convention(
        DECLARED,
        f"Declared half_precision='input_dtype': in {inst.dtype} it forms "
        f"{', '.join(quantities)} in the input dtype, not in "
        "float32 (SPEC.md §10.10); held to the naive run's error instead of the careful "
        f"one ({int(lost.sum())} position(s) where that reference overflows are not judged). "
        f"Against the careful run: {failure.message}",
    )
    return True
