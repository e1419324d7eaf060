"""Masks and weights on the wrong axis (conformance/diagnosis/hypotheses_mask_axes.py): the
causal triangle read inverted and the weights contracted over the query axis, each checked
against the formula it stands for, and never fitting the spec's own output; the
cross-attention's mask and memory (hypotheses_cross.py); each named on a mutant of its own."""

from __future__ import annotations

import numpy as np
import pytest
from support.oracle_failure import first_oracle_failure

from tck.conformance.diagnosis.hypotheses_cross import cross_attention_hypotheses
from tck.conformance.diagnosis.hypotheses_mask_axes import (
    causal_inverted_hypotheses,
    weights_transposed_hypotheses,
)
from tck.reference import oracle
from tck.reference.variants import oracle_variant, reaches


def _qkv(n: int = 5, seed: int = 0) -> tuple[np.ndarray, ...]:
    g = np.random.default_rng(seed)
    return tuple(g.standard_normal((1, 2, n, 4)) for _ in range(3))


def test_the_inverted_causal_mask_keeps_the_strict_future() -> None:
    (alternative,) = causal_inverted_hypotheses("decoder_layer")
    keep = oracle_variant(alternative.pieces).causal_keep_mask(4, 4)
    np.testing.assert_array_equal(keep, np.triu(np.ones((4, 4), bool), 1))
    assert alternative.code == "mask.polarity_inverted" and alternative.nan == "ignore"


def test_the_inverted_causal_mask_is_offered_wherever_a_causal_mask_is_built() -> None:
    for component in ("decoder_layer", "causal_self_attention", "causal_lm"):
        assert reaches(component, "causal_keep_mask")
        assert list(causal_inverted_hypotheses(component))
    assert not list(causal_inverted_hypotheses("layer_norm"))


def test_transposed_weights_are_attn_transpose_times_values() -> None:
    q, k, v = _qkv()
    (alternative,) = weights_transposed_hypotheses("attention")
    got = oracle_variant(alternative.pieces).scaled_dot_product_attention(q, k, v)
    weights = oracle.softmax((q @ np.swapaxes(k, -1, -2)) / 2.0)
    np.testing.assert_allclose(got, np.swapaxes(weights, -1, -2) @ v)
    assert not np.allclose(got, oracle.scaled_dot_product_attention(q, k, v))


def test_cross_attention_hypotheses_reach_every_component_with_a_decoder_layer() -> None:
    for component in ("decoder_layer", "decoder", "seq2seq"):
        codes = {a.code for a in cross_attention_hypotheses(component)}
        assert codes == {
            "mask.ignored",
            "attention.cross_keys_from_decoder",
            "blocks.memory_normed",
        }, component
    assert not list(cross_attention_hypotheses("encoder_layer"))


@pytest.mark.parametrize(
    ("mutant", "code"),
    [
        ("weights_transposed_matmul", "attention.softmax_axis_wrong"),
        ("causal_future_kept", "mask.polarity_inverted"),
        ("cross_attn_memory_unread", "attention.cross_keys_from_decoder"),
        ("cross_attn_padding_dropped", "mask.ignored"),
    ],
)
def test_the_oracle_comparison_names_each_mutant(mutant: str, code: str) -> None:
    failure = first_oracle_failure(f"mutants.{mutant}")
    assert failure.code == code, failure.message
