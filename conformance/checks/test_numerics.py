"""§10.7 Precision: every subject in every lower-precision dtype its adapter offers.

Each check builds the subject in float32, float16 or bfloat16 (``Adapter.dtypes``; a dtype
it does not offer is a skip with the reason), rounds parameters and inputs to that dtype
once, and compares the output with the float64 oracle on those rounded values. The bound is
the tolerance rule's: ``k * max|careful - gold| + floor``, where ``careful`` is the torch
model run in the same dtype (``careful.careful``: the careful run of SPEC.md §10.10,
norm statistics and softmax in float32). NaN where the oracle has none fails, and a
failure that float64 does not show is named by the quantity that explains it
(``tck.conformance.diagnosis.precision``).

Besides ordinary inputs (lengths 17 and 65: not multiples of 8, 16 or 64), the stress checks
go where low precision breaks: large magnitudes (softmax overflows without its max
subtraction), rows of tiny variance (LayerNorm's eps regime, and one-pass variance
cancelling), long positions (a position or frequency rounded to float16 or bfloat16 turns
the angle by radians), fully-masked rows in float16 (``finfo.min`` plus a negative score
overflows to -inf, and softmax of all -inf is NaN), outlier activations (a few channels at
300-1000: ``(x - mean)**2`` overflows float16) and softmax rows whose sum or exponentials
are past float16's range (SPEC.md §10.10).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tck.adapters import Unsupported
from tck.conformance.diagnosis import precision
from tck.conformance.toolkit import spaces
from tck.conformance.toolkit.harness import Harness, Instance
from tck.conformance.toolkit.results import CheckFailure
from tck.reference.components import record, select, tagged
from tck.reference.inputs import Inputs, Shape, padding
from tck.reference.tolerance import LOW_PRECISION, round_to

spec = pytest.mark.spec
components = pytest.mark.components
dtypes = pytest.mark.parametrize("dtype", LOW_PRECISION)

IMAGES = select("images")
SWEEP = (
    Shape(),  # batch 2, rows of different length, Lq != Lk
    Shape(batch=2, lq=17, lk=65, causal=True),  # lengths not multiples of 8, 16 or 64
)
LARGE = 30.0  # scores of ~1e3: exp overflows in every dtype without the max subtraction
# Positions where float16 (spacing 8 above 4096) and bfloat16 (spacing 2 above 256, 32
# above 4096) cannot represent the position itself.
LONG_POSITIONS = np.array([0, 1, 2, 3, 255, 257, 1000, 2047, 2049, 4095, 6001, 8191])


def _call(tck: Harness, inst: Instance, inputs: Inputs, what: str) -> str | None:
    """Compare one call; a call the subject refuses is returned as the reason. A subject
    that declares ``half_precision="input_dtype"`` and meets the naive run's bound
    gets a convention row (§10.10)."""
    try:
        tck.assert_matches_oracle(inst, inputs, what=f"{inst.dtype}, {what}")
    except Unsupported as why:
        return f"{what}: {why}"
    except CheckFailure as failure:
        if failure.code.endswith(".oracle_mismatch") and precision.declared_input_dtype(
            tck, inst, inputs, failure
        ):
            return None
        raise _dtype_specific(tck, inst, inputs, failure) from None
    return None


def _dtype_specific(
    tck: Harness, inst: Instance, inputs: Inputs, failure: CheckFailure
) -> CheckFailure:
    """A generic mismatch that float64 does not show is a precision bug: say so."""
    # A fit on a call where no query saw a key (every score under the mask fill, or a
    # softmax whose sum overflowed to inf: zeros either way) names nothing: still asked.
    degenerate = tck.record.metrics.get("degenerate_fit") == failure.code
    generic = failure.code.endswith(".oracle_mismatch") or failure.code == precision.OVERFLOW
    if not (generic or degenerate):
        return failure  # explain() already named a convention or a mask bug
    cancels = precision.variance_cancels(tck, inst, inputs, failure)
    if cancels is not None:  # in float64 too: the shift, not the dtype, is the evidence
        return cancels
    # an overflow explain() found is still asked which quantity left the range
    try:  # a subject offering only lower precisions cannot be built in float64: no excuse
        exact = tck.instance(inst.config, seed=inst.seed)
        test = tck.run(exact, inputs)
    except (Unsupported, CheckFailure):
        return failure
    gold = tck.gold(exact, inputs)
    from tck.reference.tolerance import compare

    if test.shape == gold.shape and compare(test, gold, ignore=tck.ignore_mask(exact, gold)).passed:
        return precision.name_precision_failure(tck, inst, inputs, failure)
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


@spec("10.7", id="numerics.dtype_sweep")
@dtypes
def test_dtype_sweep(tck: Harness, dtype: str) -> None:
    """Ordinary inputs in each dtype, and self-attention through one tensor for mha."""
    inst = _instance(tck, dtype)
    calls: list[tuple[str, Inputs]] = []
    for index, shape in enumerate(SWEEP):
        if tck.component in IMAGES and index:
            continue
        calls.append((f"B={shape.batch}, Lq={shape.lq}, Lk={shape.lk}", tck.inputs(inst, shape)))
    if record(tck.component).has("qkv"):  # q = k = v: the path self-attention fast paths take
        x = tck.inputs(inst, Shape(lq=7, lk=7), seed=1)
        calls.append(
            ("self-attention", {**x, "query": x["key"], "value": x["key"]})  # one tensor
        )
    unsupported = [r for what, inputs in calls if (r := _call(tck, inst, inputs, what))]
    _finish(tck, unsupported, len(calls))


@spec("10.7", "3.1", "5.1", "5.3", "5.4", id="numerics.large_magnitudes")
# Not bfloat16: scores of ~1e3 are spaced 4 to 8 apart there, so the softmax of every
# implementation is noise (measured: naive and torch.nn differ by up to 10x their errors).
@pytest.mark.parametrize("dtype", ("float32", "float16"))
@components(*select("large_inputs"))
def test_large_magnitudes(tck: Harness, dtype: str) -> None:
    """Inputs x30: attention scores of ~1e3, where softmax must subtract its row maximum."""
    inst = _instance(tck, dtype)
    inputs = tck.inputs(inst, Shape(batch=2, lq=6, lk=11, magnitude=LARGE), seed=2)
    unsupported = _call(tck, inst, inputs, f"inputs x{LARGE:g}")
    _finish(tck, [unsupported] if unsupported else [], 1)


@spec("10.7", "5.1", "5.3", "5.4", id="numerics.low_variance_rows")
@dtypes
@components(*select("norm"))
def test_low_variance_rows(tck: Harness, dtype: str) -> None:
    """Rows whose spread is near or below the dtype's resolution: where eps decides, and where
    a one-pass variance E[x^2] - E[x]^2 cancels to nothing (or below zero)."""
    inst = _instance(tck, dtype)
    rng = np.random.default_rng(tck.seed)
    spread = np.array([1.0, 1e-2, 1e-3])[:, None, None]  # one batch row each
    x = rng.standard_normal((3, 4, inst.config.d_model)) * spread
    if record(tck.component).has("centres"):  # centring matters only to LayerNorm
        x = x + 5.0
    unsupported = _call(tck, inst, {"x": round_to(x, dtype)}, "low-variance rows")
    _finish(tck, [unsupported] if unsupported else [], 1)


@spec("10.7", "2.1", "2.3", id="numerics.long_positions")
@dtypes
@components(*select("positional"))
def test_long_positions(tck: Harness, dtype: str) -> None:
    """Positions up to 8191: the angle pos * w must be formed in high precision (a position
    or a frequency rounded to the test dtype turns it by whole radians)."""
    top = spaces.reach(tck.subject, int(LONG_POSITIONS.max()) + 1)  # ConfigSpace.max_len
    long_positions = LONG_POSITIONS[LONG_POSITIONS < top]
    inst = _instance(tck, dtype, max_len=top)
    inputs: Inputs = {"positions": long_positions.copy()}
    if record(tck.component).has("heads"):
        c, rng = inst.config, np.random.default_rng(tck.seed)
        x = rng.standard_normal((2, c.n_heads, len(long_positions), c.head_dim_k))
        inputs["x"] = round_to(x, dtype)
    unsupported = _call(tck, inst, inputs, f"positions up to {long_positions.max()}")
    _finish(tck, [unsupported] if unsupported else [], 1)


@spec("10.7", "4.4", id="numerics.fully_masked_rows")
@dtypes
@components(*select("attention"))
def test_fully_masked_rows(tck: Harness, dtype: str) -> None:
    """A batch row whose keys are all masked: in the attention core with every score of it
    below -16, where an additive ``finfo(float16).min`` fill overflows to -inf and softmax
    gives NaN; in every layer, stack and model that takes a mask, where a fill beyond the
    dtype's range (float32's minimum in a float16 model) is -inf already. The declared
    policy (SPEC.md §4.4) holds in every dtype."""
    inst = _instance(tck, dtype)
    shape = Shape(batch=2, lq=3, lk=5, lengths=(5, 0))
    inputs = tck.inputs(inst, shape, seed=3)
    keep = padding(np.array(shape.lengths), shape.lk)
    entry = record(tck.component)
    if entry.has("heads"):
        # every q_i <= -4 and k_i >= 4: q.k / sqrt(d_k) <= -16 sqrt(d_k) for every pair
        inputs["q"] = -(np.abs(inputs["q"]) + 1.0) * 4.0
        inputs["k"] = (np.abs(inputs["k"]) + 1.0) * 4.0
        inputs["keep_mask"] = keep[:, None, None, :]
    else:  # the row's every key hidden, whatever length the mask has
        mask = np.array(inputs[entry.key_mask], bool)
        mask[1] = False
        inputs[entry.key_mask] = mask
    inputs = {k: round_to(v, dtype) for k, v in inputs.items()}
    try:
        unsupported = _call(tck, inst, inputs, "a batch row with every key masked")
    except CheckFailure as failure:
        raise _fill_out_of_range(tck, inst, inputs, failure) from None
    _finish(tck, [unsupported] if unsupported else [], 1)


def _fill_out_of_range(
    tck: Harness, inst: Instance, inputs: Inputs, failure: CheckFailure
) -> CheckFailure:
    """A precision failure confined to the fully-masked row, where the same call in float64
    follows the declared policy: the mask's fill value is out of the dtype's range (float32's
    minimum or -1e9 in a float16 model is -inf there), so that row alone changes with the
    dtype. Other failures are returned as they are."""
    if failure.code not in (precision.PRECISION_LOSS, precision.OVERFLOW) and not (
        failure.code.endswith(".oracle_mismatch")
    ):
        return failure
    from tck.conformance.toolkit.careful import careful
    from tck.reference.tolerance import compare

    try:
        out, gold = tck.run(inst, inputs), tck.gold(inst, inputs)
        ref = careful(tck, inst, inputs)
        exact = tck.instance(inst.config, seed=inst.seed)
        exact_out = tck.run(exact, inputs)
    except (Unsupported, CheckFailure):
        return failure
    full_row_right = tck.compare(inst, out[:1], gold[:1], careful=ref[:1]).passed
    float64_right = compare(exact_out, tck.gold(exact, inputs)).passed
    if not (full_row_right and float64_right):
        return failure
    policy = inst.conventions.fully_masked_rows
    return CheckFailure(
        "numerics.fill_value_overflow",
        f"in {inst.dtype} the batch row whose every key is masked breaks the declared "
        f"fully_masked_rows={policy!r} while the row with keys is right, and in float64 the "
        "same call follows the policy: the mask's fill value does not fit "
        f"{inst.dtype} (finfo(float32).min, -1e9 or -1e30 in a 16-bit model is -inf there, "
        "and a row of -inf scores gives NaN, or zeros where a kernel guards it). Fill with "
        f"torch.finfo(dtype).min of the model's dtype (SPEC.md §4.4, §10.7). [{failure.message}]",
        failure.metrics,
    )


# --------------------------------------------------------------- §10.10: where half breaks

# Trained models carry a few outlier channels 100-1000x the rest in their activations
# (Dettmers et al. 2022, LLM.int8(); Kovaleva et al. 2021, "BERT busters"; Sun et al. 2024,
# "Massive activations"). Per batch row, (channel, value) pairs: |x - mean| > 256 in each, so
# (x - mean)**2 and x**2 overflow float16 (65504); in the last row the variance itself does.
OUTLIERS = (((3, 600.0), (17, -300.0)), ((5, 1000.0), (11, -1000.0), (20, 400.0)))
NORM_FIRST = tagged("norm_first")


def outlier_activations(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``x`` (B, L, D), N(0, 1) entries, with the outlier channels of ``OUTLIERS`` (row b takes
    ``OUTLIERS[b % 2]``), each jittered by 5% per position as trained activations are."""
    x = x.copy()
    for b in range(x.shape[0]):
        for channel, value in OUTLIERS[b % len(OUTLIERS)]:
            channel %= x.shape[-1]
            x[b, :, channel] = value * (1.0 + 0.05 * rng.standard_normal(x.shape[1]))
    return x


@spec("10.10", "10.7", "5.1", "5.3", "5.4", id="numerics.outlier_activations")
@dtypes
@components(*select("norm"), *NORM_FIRST)
def test_outlier_activations(tck: Harness, dtype: str) -> None:
    """Activations with trained-model statistics: a few channels at 300-1000 among N(0, 1)
    ones. The norm statistics must be formed in float32 (SPEC.md §10.10): in float16
    ``(x - mean)**2`` is inf beyond |x - mean| = 256, and the normalised row collapses to the
    bias. Layers and stacks are checked when they normalise first (pre-LN), where outlier
    channels live in trained models: the residual stream."""
    inst = _instance(tck, dtype)
    if tck.component in NORM_FIRST and inst.conventions.norm_placement != "pre":
        pytest.skip(
            "post-LN: the input reaches attention before any norm, so outlier channels would "
            "test score overflow in the projections, not the norm statistics"
        )
    rng = np.random.default_rng(tck.seed)
    inputs = tck.inputs(inst, Shape(batch=2, lq=5, lk=6), seed=4)
    inputs["x"] = round_to(outlier_activations(inputs["x"], rng), dtype)
    unsupported = _call(tck, inst, inputs, "outlier channels up to 1000")
    _finish(tck, [unsupported] if unsupported else [], 1)


# The composite decoder-only subjects (§11.4, §11.5): a user who exposes only the block or the
# whole model gets the norm-statistics and RoPE-angle stress of the single norm and RoPE.
DECODERS = tuple(n for n in tagged("kv_cache") if record(n).level != "op")
# Two rows of consecutive long positions (one sequence each, as a long prompt's tail is):
# float16 spacing is 4 just below 8192, bfloat16's 32; both round positions past 2048.
LONG_WINDOWS = ((8180, 12), (2044, 12))


@spec("10.10", "10.7", "5.1", "5.3", "11.4", "11.5", id="numerics.decoder_outlier_activations")
@dtypes
@components(*DECODERS)
def test_decoder_outlier_activations(tck: Harness, dtype: str) -> None:
    """The outlier-channel stress of ``numerics.outlier_activations`` through a pre-LN
    decoder block (outliers in its input, the residual stream) or a whole causal LM (outlier
    channels in every row of its token embedding, so the stream carries them into every
    norm): each norm's statistics must be formed in float32 (SPEC.md §10.10)."""
    inst = _instance(tck, dtype)
    if inst.conventions.norm_placement != "pre":
        pytest.skip(
            "post-LN: the input reaches attention before any norm, so outlier channels would "
            "test score overflow in the projections, not the norm statistics"
        )
    rng = np.random.default_rng(tck.seed)
    inputs = tck.inputs(inst, Shape(batch=2, lq=5, lk=5, masked=False), seed=4)
    if record(tck.component).level == "model":
        params = dict(inst.params or {})
        table = params["embedding.weight"][None]  # (1, V, D): one set of outlier channels
        params["embedding.weight"] = round_to(outlier_activations(table, rng)[0], dtype)
        try:
            tck.adapter.load(inst.handle, params)
        except Unsupported as why:
            pytest.skip(f"the outliers are loaded into the embedding: {why}")
        inst = dataclasses.replace(inst, params=params)
    else:
        inputs["x"] = round_to(outlier_activations(inputs["x"], rng), dtype)
    unsupported = _call(tck, inst, inputs, "outlier channels up to 1000")
    _finish(tck, [unsupported] if unsupported else [], 1)


@spec("10.10", "10.7", "2.3", "11.1", "11.4", "11.5", id="numerics.decoder_long_positions")
@dtypes
@components(*tagged("kv_cache"))
def test_decoder_long_positions(tck: Harness, dtype: str) -> None:
    """The long-position stress of ``numerics.long_positions`` through causal attention, a
    decoder block or a whole causal LM under RoPE: rows of 12 consecutive positions ending
    at 8191 and at 2055, where a position or a frequency rounded to float16 or bfloat16 turns
    the angle pos * w by radians (SPEC.md §2.3, §10.10)."""
    top = spaces.reach(tck.subject, 8192)
    inst = _instance(tck, dtype, max_len=top)
    if inst.conventions.positions != "rope":
        pytest.skip(
            "learned positions: a long position is a row of the position table, looked up "
            "whatever the dtype (numerics.long_positions stresses sinusoidal tables)"
        )
    starts = [min(start, top - length) for start, length in LONG_WINDOWS]
    if max(starts) < 257:  # bfloat16's first unrepresentable integer
        pytest.skip(f"the subject's maximum length {top} has no position past 256")
    inputs = tck.inputs(inst, Shape(batch=2, lq=12, lk=12, masked=False), seed=5)
    inputs["positions"] = np.stack([np.arange(s, s + 12) for s in starts]).astype(np.int64)
    unsupported = _call(tck, inst, inputs, f"positions up to {max(starts) + 11}")
    _finish(tck, [unsupported] if unsupported else [], 1)


SUM_SCORE = 10.0  # exp(10) = 22026 fits float16; eleven of them (242,000) do not
EXP_SCORE = 20.0  # exp(20) = 4.9e8 does not fit float16 (nor does its sum); float32 holds both


def _near(rng: np.random.Generator, shape: tuple[int, ...], value: float) -> np.ndarray:
    """Vectors along (1, ..., 1) of length ``value``, with a little noise across them."""
    d = shape[-1]
    return value / np.sqrt(d) + 0.05 * rng.standard_normal(shape)


def aimed_scores(tck: Harness, inst: Instance, score: float, seed: int) -> Inputs:
    """Inputs whose attention scores are all near ``score``, over rows of 11 keys. For mha,
    self-attention (query = key = value, the form every mha subject accepts) over positions
    that are one vector ``c`` plus 1% noise, with ``c`` solved so that every head's score
    ``(W_q c + b_q)_h . (W_k c + b_k)_h / sqrt(d_k)`` is ``score`` (``_solve_scores``)."""
    c, rng = inst.config, np.random.default_rng(seed)
    if record(tck.component).has("heads"):
        inputs = tck.inputs(inst, Shape(batch=2, lq=4, lk=11, masked=False), seed=seed)
        length = np.sqrt(score * np.sqrt(c.head_dim_k))  # |q| |k| / sqrt(d_k) = score
        inputs["q"] = _near(rng, inputs["q"].shape, length)
        inputs["k"] = _near(rng, inputs["k"].shape, length)
        return {k: round_to(v, inst.dtype) for k, v in inputs.items()}
    params = inst.params or {}
    if "q.weight" not in params or "k.weight" not in params:
        pytest.skip("mha without canonical q/k weights: the scores cannot be aimed")
    centre = _solve_scores(params, c.n_heads, c.head_dim_k, score, rng)
    if centre is None:
        pytest.skip(f"no input puts every head's score near {score:g} for these weights")
    x = centre + 0.01 * np.abs(centre).mean() * rng.standard_normal((2, 11, centre.size))
    x = round_to(x, inst.dtype)
    return {"query": x, "key": x, "value": x}


def _solve_scores(
    params: dict[str, np.ndarray], heads: int, dk: int, score: float, rng: np.random.Generator
) -> np.ndarray | None:
    """A vector c with every head's q.k / sqrt(d_k) equal to ``score`` (Newton, min-norm)."""
    wq, wk = params["q.weight"], params["k.weight"]
    bq = params.get("q.bias", np.zeros(wq.shape[0]))
    bk = params.get("k.bias", np.zeros(wk.shape[0]))

    def scores(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q, k = (wq @ x + bq).reshape(heads, dk), (wk @ x + bk).reshape(heads, dk)
        jac = np.stack(
            [
                (wq[h * dk : (h + 1) * dk].T @ k[h] + wk[h * dk : (h + 1) * dk].T @ q[h])
                for h in range(heads)
            ]
        )
        return (q * k).sum(-1) / np.sqrt(dk), jac / np.sqrt(dk)

    for _ in range(8):  # restarts
        x = rng.standard_normal(wq.shape[1])
        for _ in range(50):
            value, jac = scores(x)
            if np.all(np.abs(value - score) < 1e-3 * score):
                return x
            x = x + np.linalg.lstsq(jac, score - value, rcond=None)[0]
    return None


@spec("10.10", "10.7", "3.1", id="numerics.softmax_sum_beyond_float16")
@dtypes
@components(*select("attention"))
def test_softmax_sum_beyond_float16(tck: Harness, dtype: str) -> None:
    """Rows of scores near 10: each exponential fits float16, the row's sum does not. A
    softmax whose sum is formed in float16 without the max subtraction divides by inf and
    returns zeros; the careful one subtracts the max and sums in float32 (SPEC.md §10.10)."""
    inst = _instance(tck, dtype)
    inputs = aimed_scores(tck, inst, SUM_SCORE, seed=5)
    unsupported = _call(tck, inst, inputs, f"scores near {SUM_SCORE:g}, row sums past 65504")
    _finish(tck, [unsupported] if unsupported else [], 1)


@spec("10.10", "10.7", "3.1", id="numerics.softmax_exp_beyond_float16")
@dtypes
@components(*select("attention"))
def test_softmax_exp_beyond_float16(tck: Harness, dtype: str) -> None:
    """Rows of scores near 20: exp(20) is past float16's range (float32 holds it). Without the
    max subtraction in float32 the exponentials are inf and the weights NaN: an overflow
    (SPEC.md §10.10)."""
    inst = _instance(tck, dtype)
    inputs = aimed_scores(tck, inst, EXP_SCORE, seed=6)
    unsupported = _call(tck, inst, inputs, f"scores near {EXP_SCORE:g}, exp past 65504")
    _finish(tck, [unsupported] if unsupported else [], 1)
