"""§5 Normalisation: LayerNorm, RMSNorm and ScaleNorm properties, and output statistics.

The properties need no parameters (they hold for any gain and bias); the statistics probe
loads unit gain and zero bias, so that the output's mean and variance can be read off and
held to the declared eps, eps placement and variance.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tck.conformance.toolkit.deltas import Delta, delta, note_worst, require_deterministic
from tck.conformance.toolkit.harness import Harness, Instance
from tck.conformance.toolkit.input_edits import rng
from tck.conformance.toolkit.instances import cached_instance, zero_params
from tck.conformance.toolkit.results import CheckFailure
from tck.conformance.toolkit.strategies import seeds
from tck.reference.catalogue import convention_code
from tck.reference.components import record, select
from tck.reference.tolerance import ISLAND_FLOOR, float64_floor

spec = pytest.mark.spec
components = pytest.mark.components

NORMS = select("norm")


def rows(seed: int, batch: int, length: int, d: int, spread: float = 1.0) -> np.ndarray:
    """[B, L, D] rows with variance about spread^2 and a random offset each."""
    generator = rng(seed)
    x = generator.standard_normal((batch, length, d)) * spread
    return x + generator.uniform(-3, 3, size=(batch, length, 1))


@spec("5.1", "5.2", id="norm.shift_invariance")
@components("layer_norm")
@given(seed=seeds, shift=st.floats(-100, 100, allow_nan=False))
def test_shift_invariance(tck: Harness, seed: int, shift: float) -> None:
    """§5.2: LN(x + c) = LN(x) for a constant c added to every channel, under every eps,
    eps placement and variance convention, and for any gain and bias."""
    inst = cached_instance(tck, "default", tck.instance)
    x = rows(seed, 2, 3, inst.config.d_model)
    offsets = rng(seed + 1).uniform(-1, 1, size=(2, 3, 1)) * shift  # one c per row
    base = tck.run(inst, {"x": x})
    found = delta(base, tck.run(inst, {"x": x + offsets}))
    note_worst(tck, found)
    if found.changed:
        require_deterministic(tck, inst, {"x": x}, base)
        raise CheckFailure(
            "layer_norm.not_shift_invariant",
            f"adding a constant (up to {abs(shift):.3g}) to every channel of a row changes "
            f"the output: {found.describe()}; the mean is not subtracted over the last axis "
            "(SPEC.md §5.1, §5.2)",
            found.metrics(),
        )


@spec("5.3", id="norm.rms_scale_equivariance")
@components("rms_norm")
@given(seed=seeds, factor=st.floats(0.01, 100.0))
def test_rms_scale_equivariance(tck: Harness, seed: int, factor: float) -> None:
    """§5.3: RMSNorm(a x)_i / RMSNorm(x)_i = a sqrt(ms + eps) / sqrt(a^2 ms + eps) for every
    channel i of a row (ms = mean(x^2)): the gain cancels, a mean subtraction would not."""
    inst = cached_instance(tck, "default", tck.instance)
    x = rows(seed, 2, 3, inst.config.d_model)
    before, after = tck.run(inst, {"x": x}), tck.run(inst, {"x": x * factor})
    ms = (x**2).mean(axis=-1, keepdims=True)
    eps = inst.conventions.eps
    ratio = factor * np.sqrt(ms + eps) / np.sqrt(factor**2 * ms + eps)
    found = delta(before * ratio, after)
    note_worst(tck, found)
    if found.changed:
        require_deterministic(tck, inst, {"x": x}, before)
        raise CheckFailure(
            "layer_norm.rms_not_scale_equivariant",
            f"scaling a row by {factor:.3g} must scale the output by "
            f"a sqrt(ms + eps) / sqrt(a^2 ms + eps) with eps = {eps:g}: {found.describe()} "
            "(expected -> measured; SPEC.md §5.3)",
            found.metrics(),
        )


@spec("5.1", "5.3", "5.4", "10.2", id="norm.rows_independent")
@components(*NORMS)
@given(seed=seeds, batch=st.integers(2, 3), length=st.integers(2, 5))
def test_rows_independent(tck: Harness, seed: int, batch: int, length: int) -> None:
    """§5.1, §10.2: statistics are per position and per batch row: changing one vector
    leaves every other output vector unchanged (no batch norm, no norm over positions)."""
    inst = cached_instance(tck, "default", tck.instance)
    x = rows(seed, batch, length, inst.config.d_model)
    generator = rng(seed + 1)
    b, t = int(generator.integers(batch)), int(generator.integers(length))
    changed = x.copy()
    changed[b, t] = generator.standard_normal(x.shape[-1]) * 5.0 + 2.0
    before, after = tck.run(inst, {"x": x}), tck.run(inst, {"x": changed})
    others = np.ones((batch, length, 1), bool)
    others[b, t] = False
    across_batch = np.arange(batch)[:, None, None] != b
    found = delta(before, after, others & across_batch)
    note_worst(tck, found)
    if found.changed or delta(before, after, others).changed:
        require_deterministic(tck, inst, {"x": x}, before)
    if found.changed:
        raise CheckFailure(
            "batch.rows_interact",
            f"changing x[{b}, {t}] changes another batch row: {found.describe()}; "
            "statistics are taken across the batch (SPEC.md §5.1, §10.2)",
            found.metrics(),
        )
    found = delta(before, after, others)
    if found.changed:
        raise CheckFailure(
            "layer_norm.positions_interact",
            f"changing x[{b}, {t}] changes another position of the same row: "
            f"{found.describe()}; the norm runs over the wrong axis (SPEC.md §5.1)",
            found.metrics(),
        )


def expected_variance(x: np.ndarray, eps: float, placement: str, variance: str) -> np.ndarray:
    """The biased variance of LN(x) with unit gain and zero bias (§5.1, §5.2)."""
    d = x.shape[-1]
    centred = x - x.mean(axis=-1, keepdims=True)
    biased = (centred**2).mean(axis=-1)
    var = biased if variance == "biased" else biased * d / (d - 1)
    denominator = var + eps if placement == "inside_sqrt" else (np.sqrt(var) + eps) ** 2
    return biased / denominator


@spec("5.1", "5.2", "5.3", "5.4", id="norm.output_statistics")
@components(*NORMS)
def test_output_statistics(tck: Harness) -> None:
    """§5.1: with unit gain and zero bias, LayerNorm output rows have mean 0 and biased
    variance var / (var + eps), about 1 for high-variance rows; RMSNorm rows have mean
    square ms / (ms + eps); ScaleNorm rows (§5.4) have norm ||x|| / max(||x||, eps). A
    variance divided by D - 1 shows as (D - 1) / D."""
    inst = tck.instance(params=False)
    params = zero_params(inst)
    params["weight"] = np.ones_like(params["weight"])
    tck.adapter.load(inst.handle, params)  # Unsupported -> skip
    conv, d = inst.conventions, inst.config.d_model
    x = rows(tck.seed, 2, 4, d, spread=10.0)
    x[1] = x[1] * 1e-2  # variance ~1e-2: eps starts to show
    out = tck.run(inst, {"x": x})
    if record(tck.component).has("l2_norm"):  # §5.4: unit gain, row norm min(||x|| / eps, 1)
        require_norms(tck, x, out, 1.0, conv.eps)
        return
    if not record(tck.component).has("centres"):
        ms = (x**2).mean(axis=-1)
        found = delta(ms / (ms + conv.eps), (out**2).mean(axis=-1))
        tck.note(found.metrics())
        if found.changed:
            raise CheckFailure(
                "layer_norm.rms_wrong_statistics",
                f"the mean square of RMSNorm rows must be ms / (ms + eps), eps = {conv.eps:g}: "
                f"{found.describe()} (expected -> measured; SPEC.md §5.3)",
                found.metrics(),
            )
        return
    mean = delta(np.zeros(out.shape[:-1]), out.mean(axis=-1))
    if mean.changed:
        raise CheckFailure(
            "layer_norm.not_centred",
            f"with zero bias every output row must have mean 0: {mean.describe()} (SPEC.md §5.1)",
            mean.metrics(),
        )
    measured = out.var(axis=-1)  # biased
    want = expected_variance(x, conv.eps, conv.eps_placement, conv.variance)
    found = delta(want, measured)
    tck.note({**found.metrics(), "output_variance": measured.ravel().tolist()})
    if not found.changed:
        return
    other = "unbiased" if conv.variance == "biased" else "biased"
    if not delta(expected_variance(x, conv.eps, conv.eps_placement, other), measured).changed:
        raise CheckFailure(
            convention_code("variance", other),
            f"output rows have the variance of a norm with {other} variance (divide by "
            f"{'D - 1' if other == 'unbiased' else 'D'}), but the adapter declares "
            f"variance={conv.variance!r}: {found.describe()} (expected -> measured; "
            "SPEC.md §5.2)",
            found.metrics(),
        )
    ratio = float(np.median(measured / want))
    raise CheckFailure(
        "layer_norm.wrong_statistics",
        f"output rows of unit-gain, zero-bias LayerNorm must have biased variance "
        f"var / (var + eps) under the declared eps={conv.eps:g}, "
        f"{conv.eps_placement}, {conv.variance}: {found.describe()} (expected -> measured, "
        f"median ratio {ratio:.6g}; (D-1)/D = {(d - 1) / d:.6g}; SPEC.md §5.1, §5.2)",
        {**found.metrics(), "variance_ratio": ratio if math.isfinite(ratio) else None},
    )


# ------------------------------------------------------------------------ §5.4 ScaleNorm


def l2_norms(x: np.ndarray) -> np.ndarray:
    """||x|| over the last axis, kept as a trailing axis of 1: (..., 1)."""
    return np.sqrt((x**2).sum(axis=-1, keepdims=True))


def _clamped(x: np.ndarray, eps: float) -> np.ndarray:
    return np.maximum(l2_norms(x), eps)  # §5.4


def _rms_eps_inside(x: np.ndarray, eps: float) -> np.ndarray:
    return np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps)


def _rms_clamped(x: np.ndarray, eps: float) -> np.ndarray:
    return np.maximum(np.sqrt((x**2).mean(axis=-1, keepdims=True)), eps)


def _norm_plus_eps(x: np.ndarray, eps: float) -> np.ndarray:
    return l2_norms(x) + eps


def _eps_inside_sqrt(x: np.ndarray, eps: float) -> np.ndarray:
    return np.sqrt((x**2).sum(axis=-1, keepdims=True) + eps)


# What public ScaleNorms divide by instead of max(||x||, eps) (SPEC.md §5.4), each with the
# code that names it: y = g x / divisor(x, eps). A check that fails tries each and names the
# one that reproduces what it measured.
WRONG_DIVISORS = (
    ("layer_norm.scale_norm_rms", "sqrt(mean(x^2) + eps), the RMS", _rms_eps_inside),
    ("layer_norm.scale_norm_rms", "max(sqrt(mean(x^2)), eps), the RMS", _rms_clamped),
    ("layer_norm.scale_norm_eps_not_clamped", "||x|| + eps", _norm_plus_eps),
    ("layer_norm.scale_norm_eps_not_clamped", "sqrt(||x||^2 + eps)", _eps_inside_sqrt),
)


def name_divisor(
    predict: Callable[[Callable[[np.ndarray, float], np.ndarray]], np.ndarray],
    measured: np.ndarray,
    found: Delta,
    what: str,
) -> None:
    """Raise the code of the first of ``WRONG_DIVISORS`` whose prediction (``predict`` of the
    divisor) reproduces ``measured``; return when none does."""
    for code, divisor_name, divisor in WRONG_DIVISORS:
        with np.errstate(invalid="ignore", divide="ignore"):
            predicted = predict(divisor)
        if not delta(predicted, measured).changed:
            raise CheckFailure(
                code,
                f"{what} is reproduced by dividing by {divisor_name} instead of "
                f"max(||x||, eps): {found.describe()} (expected -> measured; SPEC.md §5.4)",
                # reproduced at the comparison's own precision: the reports' strongest evidence
                {**found.metrics(), "reproduced_by": code},
            )


def require_norms(tck: Harness, x: np.ndarray, out: np.ndarray, gain: float, eps: float) -> None:
    """§5.4: the rows of ScaleNorm(x) with gain g have norm |g| ||x|| / max(||x||, eps); a
    failure is named by what reproduces the measured norms (another divisor, no gain)."""
    norms = l2_norms(x)
    want = abs(gain) * norms / _clamped(x, eps)
    measured = l2_norms(out)
    found = delta(want, measured)
    tck.note({**found.metrics(), "gain": gain})
    if not found.changed:
        return
    what = f"the norm of the output rows with gain g = {gain:.6g}"
    name_divisor(lambda divisor: abs(gain) * norms / divisor(x, eps), measured, found, what)
    if abs(abs(gain) - 1.0) > 1e-3 and not delta(want / abs(gain), measured).changed:
        raise CheckFailure(
            "layer_norm.gain_unused",
            f"output rows have norm 1 with the gain g = {gain:.6g} loaded: g is never "
            f"multiplied: {found.describe()} (expected -> measured; SPEC.md §5.4)",
            {**found.metrics(), "reproduced_by": "layer_norm.gain_unused"},
        )
    raise CheckFailure(
        "layer_norm.scale_norm_wrong_norm",
        f"output rows of ScaleNorm with gain g = {gain:.6g} must have norm "
        f"|g| ||x|| / max(||x||, eps), eps = {eps:g}: {found.describe()} (expected -> "
        "measured; SPEC.md §5.4)",
        found.metrics(),
    )


def _with_gain(tck: Harness, gain: float) -> Instance:
    """The cached instance of this check with the scalar gain ``gain`` loaded."""
    inst = cached_instance(tck, "no_params", lambda: tck.instance(params=False))
    params = zero_params(inst)
    params["weight"] = np.full_like(params["weight"], gain)
    tck.adapter.load(inst.handle, params)  # Unsupported -> skip
    return inst


gains = st.floats(0.25, 8.0) | st.floats(-8.0, -0.25)


@spec("5.4", id="norm.scale_norm_output_norm")
@components("scale_norm")
@given(seed=seeds, gain=gains)
def test_scale_norm_output_norm(tck: Harness, seed: int, gain: float) -> None:
    """§5.4: every output row has norm |g| once ||x|| > eps, whatever the row's size (rows of
    norm about 1e-3 to 1e3 here) and the sign of g: one scalar gain, an L2 norm."""
    inst = _with_gain(tck, gain)
    x = rows(seed, 3, 4, inst.config.d_model)
    x = x * np.array([1e-3, 1.0, 1e3])[:, None, None] / math.sqrt(inst.config.d_model)
    require_norms(tck, x, tck.run(inst, {"x": x}), gain, inst.conventions.eps)


@spec("5.4", id="norm.scale_norm_scale_invariance")
@components("scale_norm")
@given(seed=seeds, factor=st.floats(0.01, 100.0) | st.floats(-100.0, -0.01))
def test_scale_norm_scale_invariance(tck: Harness, seed: int, factor: float) -> None:
    """§5.4: ScaleNorm(a x) = sign(a) ScaleNorm(x) while ||x|| and |a| ||x|| exceed eps: the
    norm cancels the factor; eps added to the norm, or a mean square with eps inside, would
    not (``y(a x) / y(x) = a d(x) / d(a x)`` for a divisor d)."""
    inst = cached_instance(tck, "default", tck.instance)
    x = rows(seed, 2, 3, inst.config.d_model)
    before, after = tck.run(inst, {"x": x}), tck.run(inst, {"x": x * factor})
    found = delta(before * math.copysign(1.0, factor), after)
    note_worst(tck, found)
    if not found.changed:
        return
    require_deterministic(tck, inst, {"x": x}, before)
    eps = inst.conventions.eps
    name_divisor(
        lambda divisor: before * factor * divisor(x, eps) / divisor(x * factor, eps),
        after,
        found,
        f"the change of the output under scaling by {factor:.3g}",
    )
    raise CheckFailure(
        "layer_norm.scale_norm_not_scale_invariant",
        f"scaling a row by {factor:.3g} must leave the output unchanged up to the sign of "
        f"the factor: {found.describe()} (expected -> measured; SPEC.md §5.4)",
        found.metrics(),
    )


# Row norms in units of eps: zero, below, at and just above the clamp, and far above it.
NORMS_IN_EPS = (0.0, 1e-3, 0.1, 0.5, 1.0, 2.0, 10.0, 1e3)


@spec("5.4", id="norm.scale_norm_eps_clamp")
@components("scale_norm")
def test_scale_norm_eps_clamp(tck: Harness) -> None:
    """§5.4: a row of norm ``eps`` or less is divided by eps (y = g x / eps, a zero row gives
    zero, never NaN); above eps by its norm. ``||x|| + eps`` or ``sqrt(||x||^2 + eps)`` in
    place of the clamp moves the rows of this probe by a relative 1e-3 or more."""
    gain = 1.5
    inst = _with_gain(tck, gain)
    eps = inst.conventions.eps
    if not eps > 0:
        pytest.skip(f"the declared eps is {eps:g}: there is no clamp to probe (SPEC.md §5.4)")
    directions = rng(tck.seed).standard_normal((len(NORMS_IN_EPS), inst.config.d_model))
    directions /= l2_norms(directions)
    x = (directions * (np.array(NORMS_IN_EPS) * eps)[:, None])[None]  # (1, rows, D)
    out = tck.run(inst, {"x": x})
    found = delta(gain * x / _clamped(x, eps), out, real=True)
    tck.note({**found.metrics(), "eps": eps})
    if not found.changed:
        return
    what = f"the output of rows with norms from 0 to 1000 eps (eps = {eps:g})"
    name_divisor(lambda divisor: gain * x / divisor(x, eps), out, found, what)
    with float64_floor(ISLAND_FLOOR):  # SPEC.md §10.12: float32's rounding of a few steps
        float32_only = not delta(gain * x / _clamped(x, eps), out, real=True).changed
    if float32_only:  # an exported graph keeps eps (or eps^2) as a float32 constant
        raise CheckFailure(
            "numerics.float64_precision_lost",
            f"{what} agrees with g x / max(||x||, eps) to float32 precision only: eps or the "
            f"norm is held in float32 in a subject run in float64: {found.describe()} "
            "(expected -> measured; SPEC.md §5.4, §10.12)",
            found.metrics(),
        )
    if not delta(x / _clamped(x, eps), out).changed:
        raise CheckFailure(
            "layer_norm.gain_unused",
            f"{what} is x / max(||x||, eps) with the gain g = {gain:g} loaded: g is never "
            f"multiplied: {found.describe()} (expected -> measured; SPEC.md §5.4)",
            {**found.metrics(), "reproduced_by": "layer_norm.gain_unused"},
        )
    raise CheckFailure(
        "layer_norm.scale_norm_eps_wrong",
        f"rows with norms from 0 to 1000 eps (eps = {eps:g}) must be g x / max(||x||, eps): "
        f"{found.describe()} (expected -> measured; SPEC.md §5.4)",
        found.metrics(),
    )
