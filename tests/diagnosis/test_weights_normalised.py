"""Attention weights that do not sum to one, measured in any subject that holds a
self-attention (SPEC.md §3.1): one value vector for every key makes a normalised subject's
output independent of the scores, so spreading the scores moves it only when the weights
do not sum to one. The subjects here are the oracle with its attention core replaced (a
tiled softmax of another tile size than the mutant's, the running sum left unrescaled; a
normaliser taken over every key before the mask), and the bugs the measurement must not
name (a mask hiding the diagonal, a wrong scale: their weights still sum to one)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from tck.adapters import load_adapter
from tck.conformance.checks import test_normalisation
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure
from tck.reference.variants import expected_under, oracle_variant


def _harness(component: str, sdpa: Callable[..., np.ndarray] | None) -> Harness:
    loaded = load_adapter("reference")
    subject = next(s for s in loaded.subjects() if s.component == component)
    tck = Harness(loaded, subject, seed=0)
    if sdpa is not None:
        variant = oracle_variant({"scaled_dot_product_attention": sdpa})
        tck.run = lambda inst, given: expected_under(  # type: ignore[method-assign]
            variant, component, given, inst.params, inst.config, inst.conventions
        )
    return tck


def _masked_scores(q, k, keep_mask, scale):  # type: ignore[no-untyped-def]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (np.asarray(q, np.float64) @ np.swapaxes(np.asarray(k, np.float64), -1, -2)) * scale
    if keep_mask is not None:
        scores = np.where(np.broadcast_to(keep_mask, scores.shape), scores, -np.inf)
    return scores


def _tiled_sum_not_rescaled(tile: int) -> Callable[..., np.ndarray]:
    """An online softmax over tiles of ``tile`` keys whose running sum is not rescaled."""

    def sdpa(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
        scores = _masked_scores(q, k, keep_mask, scale)
        v = np.asarray(v, np.float64)
        top = np.full((*scores.shape[:-1], 1), -np.inf)
        total = np.zeros_like(top)
        acc = np.zeros((*scores.shape[:-1], v.shape[-1]))
        with np.errstate(invalid="ignore"):
            for start in range(0, scores.shape[-1], tile):
                block = scores[..., start : start + tile]
                new = np.maximum(top, block.max(-1, keepdims=True))
                safe = np.where(np.isinf(new), 0.0, new)
                alpha = np.exp(top - safe)
                p = np.exp(block - safe)
                total = total + p.sum(-1, keepdims=True)  # the bug: total * alpha + ...
                acc = acc * alpha + p @ v[..., start : start + tile, :]
                top = new
            return np.nan_to_num(acc / total)

    return sdpa


def _normalised_before_mask(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
    """softmax over every key, then the masked weights zeroed and not renormalised."""
    scores = _masked_scores(q, k, None, scale)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    if keep_mask is not None:
        weights = weights * np.broadcast_to(keep_mask, weights.shape)
    return weights @ np.asarray(v, np.float64)


def _diagonal_hidden(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
    scores = _masked_scores(q, k, keep_mask, scale)
    lq, lk = scores.shape[-2:]
    scores = np.where(np.arange(lk)[None, :] < np.arange(lq)[:, None], scores, -np.inf)
    with np.errstate(invalid="ignore"):
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        return np.nan_to_num(weights / weights.sum(-1, keepdims=True)) @ np.asarray(v, np.float64)


def _scale_doubled(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
    scores = 2 * _masked_scores(q, k, keep_mask, scale)
    with np.errstate(invalid="ignore"):
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        return np.nan_to_num(weights / weights.sum(-1, keepdims=True)) @ np.asarray(v, np.float64)


@pytest.mark.parametrize("component", test_normalisation.measured_components())
def test_a_correct_subject_passes(component: str) -> None:
    test_normalisation.test_weights_sum_to_one_long_rows(_harness(component, None))


@pytest.mark.parametrize("tile", [8, 32])
@pytest.mark.parametrize(
    "component", ["attention", "causal_self_attention", "decoder_block", "encoder", "causal_lm"]
)
def test_a_running_sum_not_rescaled_is_named(component: str, tile: int) -> None:
    tck = _harness(component, _tiled_sum_not_rescaled(tile))
    with pytest.raises(CheckFailure) as failure:
        test_normalisation.test_weights_sum_to_one_long_rows(tck)
    assert failure.value.code == "attention.weights_not_normalized", failure.value


def test_weights_off_on_every_row_are_left_to_the_oracle_comparison() -> None:
    """A normaliser taken before the causal mask is off on a row of 3 keys already: the
    measurement's premise (short rows do not depend on the scores) fails, and it skips
    rather than guess between that and values that are not one vector."""
    tck = _harness("decoder", _normalised_before_mask)
    with pytest.raises(pytest.skip.Exception, match="3 keys"):
        test_normalisation.test_weights_sum_to_one_long_rows(tck)


def _value_from_key(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
    """Correct weights over values that are not one vector (the keys taken as values)."""
    weights = np.exp(_masked_scores(q, k, keep_mask, scale))
    weights = np.nan_to_num(weights / weights.sum(-1, keepdims=True))
    return weights @ np.asarray(k, np.float64)


@pytest.mark.parametrize("component", ["causal_self_attention", "encoder_layer"])
def test_values_that_are_not_one_vector_are_not_read_as_weights(component: str) -> None:
    with pytest.raises(pytest.skip.Exception, match="not one vector"):
        test_normalisation.test_weights_sum_to_one_long_rows(_harness(component, _value_from_key))


@pytest.mark.parametrize("sdpa", [_diagonal_hidden, _scale_doubled])
@pytest.mark.parametrize("component", ["causal_self_attention", "encoder_layer"])
def test_weights_that_sum_to_one_are_not_named(component: str, sdpa: Callable) -> None:
    """A mask or scale bug changes which weights, not their sum: the measurement passes
    (the oracle comparison names those)."""
    test_normalisation.test_weights_sum_to_one_long_rows(_harness(component, sdpa))
