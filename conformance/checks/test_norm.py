"""§5 Normalisation: LayerNorm and RMSNorm properties, and output statistics.

The properties need no parameters (they hold for any gain and bias); the statistics probe
loads unit gain and zero bias, so that the output's mean and variance can be read off and
held to the declared eps, eps placement and variance.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tck.conformance.toolkit.deltas import delta, note_worst, require_deterministic
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.input_edits import rng
from tck.conformance.toolkit.instances import cached_instance, zero_params
from tck.conformance.toolkit.results import CheckFailure
from tck.conformance.toolkit.strategies import seeds
from tck.reference.catalogue import convention_code
from tck.reference.components import record, select

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


@spec("5.1", "5.3", "10.2", id="norm.rows_independent")
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


@spec("5.1", "5.2", "5.3", id="norm.output_statistics")
@components(*NORMS)
def test_output_statistics(tck: Harness) -> None:
    """§5.1: with unit gain and zero bias, LayerNorm output rows have mean 0 and biased
    variance var / (var + eps), about 1 for high-variance rows; RMSNorm rows have mean
    square ms / (ms + eps). A variance divided by D - 1 shows as (D - 1) / D."""
    inst = tck.instance(params=False)
    params = zero_params(inst)
    params["weight"] = np.ones_like(params["weight"])
    tck.adapter.load(inst.handle, params)  # Unsupported -> skip
    conv, d = inst.conventions, inst.config.d_model
    x = rows(tck.seed, 2, 4, d, spread=10.0)
    x[1] = x[1] * 1e-2  # variance ~1e-2: eps starts to show
    out = tck.run(inst, {"x": x})
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
