"""Heads split or merged feature-major, (d, H) for (H, d), named in every component that
splits or merges heads, the attention a subject or not
(tck.conformance.diagnosis.hypotheses_strided)."""

from __future__ import annotations

import numpy as np
import pytest

from tck.adapters import load_adapter
from tck.conformance.diagnosis.alternatives import Alternative, output_of
from tck.conformance.diagnosis.explain import explain
from tck.conformance.diagnosis.hypotheses_strided import (
    _split_some,
    merge_feature_major,
    split_channel_first,
    split_feature_major,
    split_grid_transposed,
)
from tck.conformance.toolkit.harness import Harness
from tck.reference import oracle
from tck.reference.inputs import Shape


def _explained(component: str, bug: Alternative) -> tuple[str, str]:
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == component)
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance()
    inputs = tck.inputs(inst, Shape())
    tck.run = lambda inst, inputs: output_of(  # type: ignore[method-assign]
        component, inputs, inst.params, inst.config, inst.conventions, bug
    )
    test = tck.run(inst, inputs)
    return explain(tck, inst, inputs, test, tck.compare(inst, test, tck.gold(inst, inputs)))


def test_feature_major_is_a_per_position_permutation() -> None:
    x = np.arange(2 * 3 * 12, dtype=float).reshape(2, 3, 12)
    split = split_feature_major(x, 4)  # (B, H, L, d) = (2, 4, 3, 3)
    assert split[0, 1, 2].tolist() == [x[0, 2, 1], x[0, 2, 5], x[0, 2, 9]]  # channels h + jH
    assert np.array_equal(merge_feature_major(oracle.split_heads(x, 4))[0, 0, :4], x[0, 0, ::3])


@pytest.mark.parametrize("component", ["encoder_layer", "encoder", "decoder_block"])
def test_a_feature_major_merge_is_named_in_layers_and_stacks(component: str) -> None:
    code, message = _explained(
        component, Alternative("", "", pieces={"merge_heads": merge_feature_major})
    )
    assert code == "attention.heads_merged_wrong_order", message
    assert "feature-major" in message


@pytest.mark.parametrize("targets", [("q",), ("k", "v")])
def test_a_feature_major_split_is_named_in_a_layer(targets: tuple[str, ...]) -> None:
    code, message = _explained("encoder_layer", Alternative("", "", pieces=_split_some(targets)))
    assert code == "attention.heads_split_wrong_order", message
    assert "feature-major" in message


def test_a_channel_first_split_is_the_reshape_a_permute_belongs_in() -> None:
    """(B, L, H*d) held (B, H*d, L), viewed (B, H, d, L) and reshaped, not permuted."""
    import torch

    x = np.random.default_rng(0).standard_normal((2, 5, 6))
    ncw = torch.from_numpy(x).transpose(1, 2).contiguous()
    by_torch = ncw.view(2, 2, 3, 5).reshape(2, 2, 5, 3).numpy()
    assert np.array_equal(split_channel_first(x, 2), by_torch)


@pytest.mark.parametrize("targets", [("q", "v"), ("k",)])
def test_a_channel_first_split_is_named_in_a_layer(targets: tuple[str, ...]) -> None:
    code, message = _explained(
        "encoder_layer", Alternative("", "", pieces=_split_some(targets, split_channel_first))
    )
    assert code == "attention.heads_split_wrong_order", message
    assert "channel-first" in message


def test_a_grid_transposed_split_is_the_inverse_of_the_feature_major_one() -> None:
    """Sockeye's (len, batch, heads, head_dim) keys permuted (batch, head_dim, heads, len)
    and reshaped to (batch * heads, head_dim, len): the (H, d) grid read as (d, H)."""
    import torch

    x = np.random.default_rng(0).standard_normal((2, 5, 6))  # (B, L, H*d), H = 2, d = 3
    time_major = torch.from_numpy(x).transpose(0, 1).reshape(5, 2, 2, 3)
    by_torch = time_major.permute(1, 3, 2, 0).reshape(2, 2, 3, 5).transpose(-1, -2).numpy()
    assert np.array_equal(split_grid_transposed(x, 2), by_torch)
    merged = oracle.merge_heads(split_grid_transposed(x, 2))
    assert np.array_equal(oracle.merge_heads(split_feature_major(merged, 2)), x)
    square = np.random.default_rng(1).standard_normal((1, 2, 9))  # H = d: the two agree
    assert np.array_equal(split_grid_transposed(square, 3), split_feature_major(square, 3))


@pytest.mark.parametrize("targets", [("k",), ("q", "k", "v")])
def test_a_grid_transposed_split_is_named_in_a_layer(targets: tuple[str, ...]) -> None:
    code, message = _explained(
        "encoder_layer", Alternative("", "", pieces=_split_some(targets, split_grid_transposed))
    )
    assert code == "attention.heads_split_wrong_order", message
    assert "(feature, head)" in message
