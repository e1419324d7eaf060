"""The §5.4 ScaleNorm checks on one call each: correct ScaleNorms (the reference, the tutorial
module with its 0-d gain) pass, and each ScaleNorm mutant fails with the code that names its
bug, on every check that sees it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tck.adapters import load_adapter
from tck.conformance.checks import test_norm as checks
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure
from tck.reference import oracle

spec = pytest.mark.spec


def harness(adapter: str) -> Harness:
    implementation = load_adapter(adapter)
    subject = next(s for s in implementation.subjects() if s.component == "scale_norm")
    return Harness(implementation, subject, seed=0)


def output_norm(tck: Harness, gain: float = -2.5) -> None:
    checks.test_scale_norm_output_norm.hypothesis.inner_test(tck, seed=3, gain=gain)


def scale_invariance(tck: Harness, factor: float = 0.02) -> None:
    checks.test_scale_norm_scale_invariance.hypothesis.inner_test(tck, seed=3, factor=factor)


def eps_clamp(tck: Harness) -> None:
    checks.test_scale_norm_eps_clamp(tck)


def output_statistics(tck: Harness) -> None:
    checks.test_output_statistics(tck)


CHECKS = (output_norm, scale_invariance, eps_clamp, output_statistics)


@spec("5.4")
@pytest.mark.parametrize("adapter", ["reference", "tck.adapters.mutants.tutorial:adapter"])
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_a_correct_scale_norm_passes(adapter: str, check) -> None:
    check(harness(adapter))


@spec("5.4")
@pytest.mark.parametrize(
    ("mutant", "check", "code"),
    [
        ("scale_norm_rms", output_norm, "layer_norm.scale_norm_rms"),
        ("scale_norm_rms", scale_invariance, "layer_norm.scale_norm_rms"),
        ("scale_norm_rms", eps_clamp, "layer_norm.scale_norm_rms"),
        ("scale_norm_rms", output_statistics, "layer_norm.scale_norm_rms"),
        ("scale_norm_eps_added", output_norm, "layer_norm.scale_norm_eps_not_clamped"),
        ("scale_norm_eps_added", scale_invariance, "layer_norm.scale_norm_eps_not_clamped"),
        ("scale_norm_eps_added", eps_clamp, "layer_norm.scale_norm_eps_not_clamped"),
        ("scale_norm_eps_added", output_statistics, "layer_norm.scale_norm_eps_not_clamped"),
        ("scale_norm_gain_unused", output_norm, "layer_norm.gain_unused"),
        ("scale_norm_gain_unused", eps_clamp, "layer_norm.gain_unused"),
    ],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_a_scale_norm_mutant_is_named(mutant: str, check, code: str) -> None:
    with pytest.raises(CheckFailure) as failure:
        check(harness(f"mutants.{mutant}"))
    assert failure.value.code == code, failure.value.message
    assert "SPEC.md §5.4" in failure.value.message


@spec("5.4")
def test_the_gain_unused_mutant_keeps_scale_invariance() -> None:
    """Without its gain a ScaleNorm is still invariant to scaling a row: that check passes and
    the norm checks name the bug."""
    scale_invariance(harness("mutants.scale_norm_gain_unused"), factor=-7.0)


@spec("5.4")
def test_the_divisors_named_by_the_checks_differ_from_the_clamp() -> None:
    """Each wrong divisor of ``WRONG_DIVISORS`` moves the probe rows of the eps check (norms 0
    to 1000 eps) by far more than the float64 bound, so none can explain a correct output."""
    eps = 1e-5
    directions = np.random.default_rng(0).standard_normal((len(checks.NORMS_IN_EPS), 8))
    directions /= checks.l2_norms(directions)
    x = directions * (np.array(checks.NORMS_IN_EPS) * eps)[:, None]
    right = oracle.scale_norm(x, [1.0], eps=eps)
    for _, name, divisor in checks.WRONG_DIVISORS:
        wrong = x / divisor(x, eps)
        assert np.max(np.abs(wrong - right)) > 1e-4, name
    # the zero row maps to zero, not NaN, under the clamp
    assert np.all(right[0] == 0.0) and math.isfinite(float(np.abs(right).max()))
