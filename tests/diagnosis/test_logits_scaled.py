"""model.logits_scaled: the spec's logits times a constant, solved for by least squares and
named where it is a power of d_model (SPEC.md §8.2, §8.3)."""

from __future__ import annotations

import numpy as np

from tck.conformance.diagnosis.hypotheses_solved import logits_scale_hypotheses
from tck.reference import Config


def _spec() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, 5, 11))


def test_a_factor_on_the_logits_is_solved_and_named() -> None:
    config = Config(d_model=16, n_heads=2)
    found = list(logits_scale_hypotheses("causal_lm", config, lambda a: _spec(), _spec() / 16))
    assert [a.code for a in found] == ["model.logits_scaled"]
    assert "1/d_model" in found[0].message
    assert np.allclose(found[0].after(_spec()), _spec() / 16)


def test_no_factor_and_no_logits_give_nothing() -> None:
    config = Config(d_model=16, n_heads=2)
    assert not list(logits_scale_hypotheses("causal_lm", config, lambda a: _spec(), _spec()))
    assert not list(logits_scale_hypotheses("encoder", config, lambda a: _spec(), _spec() / 16))
