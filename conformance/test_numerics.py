"""§10.7 Precision: every subject in every lower-precision dtype its adapter offers.

Each check builds the subject in float32, float16 or bfloat16 (``Adapter.dtypes``; a dtype
it does not offer is a skip with the reason), rounds parameters and inputs to that dtype
once, and compares the output with the float64 oracle on those rounded values. The bound is
the tolerance rule's: ``k * max|ref - gold| + floor``, where ``ref`` is the torch reference
model run in the same dtype (``Harness.naive``). NaN where the oracle has none fails.

Besides ordinary inputs (lengths 17 and 65: not multiples of 8, 16 or 64), the stress checks
go where low precision breaks: large magnitudes (softmax overflows without its max
subtraction), rows of tiny variance (LayerNorm's eps regime, and one-pass variance
cancelling), long positions (a position or frequency rounded to float16 or bfloat16 turns
the angle by radians), and fully-masked rows in float16 (``finfo.min`` plus a negative score
overflows to -inf, and softmax of all -inf is NaN).
"""

from __future__ import annotations

import numpy as np
import pytest

from tck.adapters import Unsupported
from tck.conformance.harness import Harness, Instance
from tck.conformance.inputs import Inputs, Shape, padding
from tck.conformance.results import CheckFailure
from tck.conformance.tolerance import LOW_PRECISION, round_to

spec = pytest.mark.spec
components = pytest.mark.components
dtypes = pytest.mark.parametrize("dtype", LOW_PRECISION)

IMAGES = ("patch_embed", "vit")
SWEEP = (
    Shape(),  # batch 2, rows of different length, Lq != Lk
    Shape(batch=2, lq=17, lk=65, causal=True),  # lengths not multiples of 8, 16 or 64
)
LARGE = 30.0  # scores of ~1e3: exp overflows in every dtype without the max subtraction
# Positions where float16 (spacing 8 above 4096) and bfloat16 (spacing 2 above 256, 32
# above 4096) cannot represent the position itself.
LONG_POSITIONS = np.array([0, 1, 2, 3, 255, 257, 1000, 2047, 2049, 4095, 6001, 8191])


def _call(tck: Harness, inst: Instance, inputs: Inputs, what: str) -> str | None:
    """Compare one call; a call the subject refuses is returned as the reason."""
    try:
        tck.assert_matches_oracle(inst, inputs, what=f"{inst.dtype}, {what}")
    except Unsupported as why:
        return f"{what}: {why}"
    except CheckFailure as failure:
        raise _dtype_specific(tck, inst, inputs, failure) from None
    return None


def _dtype_specific(
    tck: Harness, inst: Instance, inputs: Inputs, failure: CheckFailure
) -> CheckFailure:
    """A generic mismatch that float64 does not show is a precision bug: say so."""
    if not failure.code.endswith(".oracle_mismatch"):
        return failure  # explain() already named a convention or a mask bug
    try:  # a subject offering only lower precisions cannot be built in float64: no excuse
        exact = tck.instance(inst.config, seed=inst.seed)
        test = tck.run(exact, inputs)
    except (Unsupported, CheckFailure):
        return failure
    gold = tck.gold(exact, inputs)
    from tck.conformance.tolerance import compare

    if test.shape == gold.shape and compare(test, gold, ignore=tck.ignore_mask(exact, gold)).passed:
        low = tck.run(inst, inputs)
        if (~np.isfinite(low) & np.isfinite(gold)).any():
            return CheckFailure(
                "numerics.overflow",
                f"{failure.message}; the output is inf or NaN in {inst.dtype} where float64 "
                f"matches the oracle: an intermediate overflows {inst.dtype}'s range (exp of "
                "a score without subtracting the row maximum, a sum of squares, a large fill)",
                failure.metrics,
            )
        return CheckFailure(
            "numerics.precision_loss",
            f"{failure.message}; the same call in float64 matches the oracle, so the error "
            f"comes from computing in {inst.dtype} less carefully than a naive implementation",
            failure.metrics,
        )
    return failure


def _finish(tck: Harness, unsupported: list[str], calls: int) -> None:
    if unsupported:
        tck.note({"unsupported_calls": unsupported})
    if len(unsupported) == calls:
        pytest.skip("; ".join(unsupported))


def _instance(tck: Harness, dtype: str, **config: object) -> Instance:
    inst = tck.instance(tck.config(**config) if config else None, dtype=dtype)
    tck.require_params(inst)
    tck.note({"dtype": dtype})
    return inst


@spec("10.7")
@dtypes
def test_dtype_sweep(tck: Harness, dtype: str) -> None:
    """Ordinary inputs in each dtype, and self-attention through one tensor for mha."""
    inst = _instance(tck, dtype)
    calls: list[tuple[str, Inputs]] = []
    for index, shape in enumerate(SWEEP):
        if tck.component in IMAGES and index:
            continue
        calls.append((f"B={shape.batch}, Lq={shape.lq}, Lk={shape.lk}", tck.inputs(inst, shape)))
    if tck.component == "mha":  # query = key = value: the path self-attention fast paths take
        x = tck.inputs(inst, Shape(lq=7, lk=7), seed=1)
        calls.append(
            ("self-attention", {**x, "query": x["key"], "value": x["key"]})  # one tensor
        )
    unsupported = [r for what, inputs in calls if (r := _call(tck, inst, inputs, what))]
    _finish(tck, unsupported, len(calls))


@spec("10.7", "3.1", "5.1")
# Not bfloat16: scores of ~1e3 are spaced 4 to 8 apart there, so the softmax of every
# implementation is noise (measured: naive and torch.nn differ by up to 10x their errors).
@pytest.mark.parametrize("dtype", ("float32", "float16"))
@components(
    "attention", "mha", "layer_norm", "rms_norm", "ffn", "encoder_layer", "decoder_layer", "encoder"
)
def test_large_magnitudes(tck: Harness, dtype: str) -> None:
    """Inputs x30: attention scores of ~1e3, where softmax must subtract its row maximum."""
    inst = _instance(tck, dtype)
    inputs = tck.inputs(inst, Shape(batch=2, lq=6, lk=11, magnitude=LARGE), seed=2)
    unsupported = _call(tck, inst, inputs, f"inputs x{LARGE:g}")
    _finish(tck, [unsupported] if unsupported else [], 1)


@spec("10.7", "5.1", "5.3")
@dtypes
@components("layer_norm", "rms_norm")
def test_low_variance_rows(tck: Harness, dtype: str) -> None:
    """Rows whose spread is near or below the dtype's resolution: where eps decides, and where
    a one-pass variance E[x^2] - E[x]^2 cancels to nothing (or below zero)."""
    inst = _instance(tck, dtype)
    rng = np.random.default_rng(tck.seed)
    spread = np.array([1.0, 1e-2, 1e-3])[:, None, None]  # one batch row each
    x = rng.standard_normal((3, 4, inst.config.d_model)) * spread
    if tck.component == "layer_norm":  # centring matters only to LayerNorm
        x = x + 5.0
    unsupported = _call(tck, inst, {"x": round_to(x, dtype)}, "low-variance rows")
    _finish(tck, [unsupported] if unsupported else [], 1)


@spec("10.7", "2.1", "2.3")
@dtypes
@components("sinusoidal_pe", "rope")
def test_long_positions(tck: Harness, dtype: str) -> None:
    """Positions up to 8191: the angle pos * w must be formed in high precision (a position
    or a frequency rounded to the test dtype turns it by whole radians)."""
    inst = _instance(tck, dtype, max_len=int(LONG_POSITIONS.max()) + 1)
    inputs: Inputs = {"positions": LONG_POSITIONS.copy()}
    if tck.component == "rope":
        c, rng = inst.config, np.random.default_rng(tck.seed)
        x = rng.standard_normal((2, c.n_heads, len(LONG_POSITIONS), c.head_dim_k))
        inputs["x"] = round_to(x, dtype)
    unsupported = _call(tck, inst, inputs, f"positions up to {LONG_POSITIONS.max()}")
    _finish(tck, [unsupported] if unsupported else [], 1)


@spec("10.7", "4.4")
@dtypes
@components("attention", "mha")
def test_fully_masked_rows(tck: Harness, dtype: str) -> None:
    """A batch row whose keys are all masked, with every score of it below -16: an additive
    ``finfo(float16).min`` fill then overflows to -inf and softmax gives NaN, where the
    declared policy (SPEC.md §4.4) holds in every dtype."""
    inst = _instance(tck, dtype)
    shape = Shape(batch=2, lq=3, lk=5, lengths=(5, 0))
    inputs = tck.inputs(inst, shape, seed=3)
    keep = padding(np.array(shape.lengths), shape.lk)
    if tck.component == "attention":
        # every q_i <= -4 and k_i >= 4: q.k / sqrt(d_k) <= -16 sqrt(d_k) for every pair
        inputs["q"] = -(np.abs(inputs["q"]) + 1.0) * 4.0
        inputs["k"] = (np.abs(inputs["k"]) + 1.0) * 4.0
        inputs["keep_mask"] = keep[:, None, None, :]
    else:
        inputs["key_padding"] = keep
    inputs = {k: round_to(v, dtype) for k, v in inputs.items()}
    unsupported = _call(tck, inst, inputs, "a batch row with every key masked")
    _finish(tck, [unsupported] if unsupported else [], 1)
