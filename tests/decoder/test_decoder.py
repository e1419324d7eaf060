"""Self-tests of SPEC.md §11 (decoder-only models): the oracle against hand values and the
torch reference, the grouping rule, the KV cache of the reference model, left padding, and
the diagnosis hypotheses that live in the parameters."""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest
import torch

from tck.adapters import Subject
from tck.adapters.reference import LLAMA, adapter
from tck.conformance.checks.test_decoder import (
    cached_keys_seen,
    constant_offsets,
    probe_tokens,
    two_key_weights,
)
from tck.conformance.diagnosis.decoding import decode, gate_up_swapped, schedule, tiled_kv_heads
from tck.reference import DECODER_CANONICAL, Config, init_params, oracle
from tck.reference import model as ref
from tck.reference.components import decoder_only
from tck.reference.expected import expected
from tck.reference.inputs import Shape, make_inputs

spec = pytest.mark.spec
CONFIG = Config(d_model=24, n_heads=4, d_ff=40, vocab_size=23, max_len=64, n_kv_heads=2)
TOL = 1e-12  # float64 oracle vs float64 torch: a few ulps of O(1) values through a stack


def _subject(name: str):
    return next(s for s in adapter.subjects() if s.name == name)


def _run(name: str, shape: Shape, config: Config = CONFIG, seed: int = 0):
    subject = _subject(name)
    handle = adapter.build(subject, config, seed=seed)
    params = init_params(subject.component, config, subject.conventions, seed=seed + 1)
    adapter.load(handle, params)
    inputs = make_inputs(subject.component, config, np.random.default_rng(seed), shape)
    return subject, handle, params, inputs


@spec("11.1", "11.4", "11.5")
@pytest.mark.parametrize(
    "name",
    [
        "causal_self_attention",
        "causal_self_attention[rope]",
        "decoder_block",
        "decoder_block[llama]",
        "decoder_block[post_ln]",
        "causal_lm",
        "causal_lm[llama]",
    ],
)
def test_oracle_matches_torch_reference(name: str) -> None:
    for shape in (Shape(batch=2, lq=13), Shape(batch=1, lq=1, masked=False)):
        subject, handle, params, inputs = _run(name, shape)
        gold = expected(subject.component, inputs, params, CONFIG, subject.conventions)
        assert np.abs(adapter.run(handle, inputs) - gold).max() < TOL


@spec("11.1")
def test_causal_self_attention_by_hand() -> None:
    """One head, d = 2, identity projections: row 1 averages v_0 and v_1 by softmax."""
    eye = np.eye(2)
    params = {f"{p}.weight": eye for p in "qkvo"}
    x = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    out = oracle.causal_self_attention(x, params, n_heads=1)
    w = np.exp([0.0, 1.0 / np.sqrt(2.0)])  # scores of query 1 against keys 0, 1
    w = w / w.sum()
    assert np.allclose(out[0, 0], x[0, 0], atol=1e-15)  # row 0 sees itself alone
    assert np.allclose(out[0, 1], w[0] * x[0, 0] + w[1] * x[0, 1], atol=1e-15)


@spec("11.2")
def test_kv_head_j_serves_query_heads_jg_to_jg_plus_g() -> None:
    k = np.arange(2)[None, :, None, None] * np.ones((1, 2, 3, 1))  # kv head j holds j
    rep = oracle.repeat_kv(k, 2)  # 4 query heads
    assert rep[0, :, 0, 0].tolist() == [0, 0, 1, 1]
    assert torch.equal(
        torch.from_numpy(rep), torch.from_numpy(k).repeat_interleave(2, dim=1)
    )  # transformers' repeat_kv and the reference model's rule


@spec("11.2")
def test_tiled_grouping_is_a_parameter_permutation() -> None:
    """The tiled rule (head h uses kv head h mod H_kv) equals the oracle on permuted params,
    which is how the harness names the bug; with H_kv = 1 or H the rules agree."""
    _, _, params, inputs = _run("causal_self_attention", Shape(batch=2, lq=6, masked=False))
    x = inputs["x"]
    h, h_kv, d = CONFIG.n_heads, CONFIG.kv_heads, CONFIG.head_dim_k
    q = oracle.split_heads(oracle.linear(x, params, "q."), h)
    k = oracle.split_heads(oracle.linear(x, params, "k."), h_kv)
    v = oracle.split_heads(oracle.linear(x, params, "v."), h_kv)
    tiled_k, tiled_v = np.tile(k, (1, h // h_kv, 1, 1)), np.tile(v, (1, h // h_kv, 1, 1))
    heads = oracle.scaled_dot_product_attention(q, tiled_k, tiled_v, np.tril(np.ones((6, 6), bool)))
    tiled_out = oracle.linear(oracle.merge_heads(heads), params, "o.")
    right = oracle.causal_self_attention(x, params, n_heads=h, n_kv_heads=h_kv)
    permuted = oracle.causal_self_attention(
        x, tiled_kv_heads(params, CONFIG), n_heads=h, n_kv_heads=h_kv
    )
    assert np.abs(permuted - tiled_out).max() < TOL
    assert np.abs(right - tiled_out).max() > 1e-3  # the rules differ here
    assert tiled_kv_heads(params, dataclasses.replace(CONFIG, n_kv_heads=1)) is None
    assert d == CONFIG.head_dim_v


@spec("11.3")
def test_gated_ffn_by_hand() -> None:
    params = {
        "gate.weight": np.array([[1.0]]),
        "up.weight": np.array([[2.0]]),
        "down.weight": np.array([[3.0]]),
    }
    x = np.array([[[0.5]]])
    silu = 0.5 / (1.0 + np.exp(-0.5))
    assert np.isclose(oracle.gated_feed_forward(x, params)[0, 0, 0], 3.0 * silu * 1.0)
    swapped = oracle.gated_feed_forward(x, gate_up_swapped(params))[0, 0, 0]
    assert np.isclose(swapped, 3.0 * (1.0 / (1.0 + np.exp(-1.0))) * 0.5)


@spec("11.6")
@pytest.mark.parametrize(
    "name", ["causal_self_attention[rope]", "decoder_block", "causal_lm[llama]"]
)
def test_reference_kv_cache_equals_full_forward(name: str) -> None:
    subject, handle, _, inputs = _run(name, Shape(batch=2, lq=9, masked=False))
    full = adapter.run(handle, inputs)
    outs, ranges = decode(adapter, handle, subject.component, inputs, prefill=2)
    assert [r for r in ranges][:2] == [(0, 2), (2, 3)]
    for out, (start, stop) in zip(outs, ranges, strict=True):
        assert np.abs(out - full[:, start:stop]).max() < TOL


@spec("11.7", "11.5")
@pytest.mark.parametrize("conv", [DECODER_CANONICAL, LLAMA], ids=["learned", "rope"])
def test_left_padding_with_shifted_positions_is_invariant(conv) -> None:
    params = init_params("causal_lm", CONFIG, conv, seed=3)
    ids = np.random.default_rng(0).integers(0, CONFIG.vocab_size, (1, 6))
    alone = oracle.causal_lm(ids, params, CONFIG, conventions=conv)
    padded = np.concatenate([np.array([[5, 7, 1]]), ids], axis=1)
    keep = np.arange(9)[None] >= 3
    shifted = np.maximum(np.arange(9) - 3, 0)[None]
    out = oracle.causal_lm(
        padded, params, CONFIG, key_padding=keep, positions=shifted, conventions=conv
    )
    assert np.abs(out[:, 3:] - alone).max() < TOL
    unshifted = oracle.causal_lm(padded, params, CONFIG, key_padding=keep, conventions=conv)
    moved = np.abs(unshifted[:, 3:] - alone).max()
    if conv.positions == "learned":
        assert moved > 1e-3  # the table rows of the pads' positions are read
    else:  # RoPE sees only j - i: one shift for every real token changes nothing (rounding)
        assert moved < 1e-10


@spec("11.8", "11.5")
def test_right_padded_rows_equal_rows_alone() -> None:
    params = init_params("causal_lm", CONFIG, DECODER_CANONICAL, seed=4)
    ids = np.random.default_rng(1).integers(0, CONFIG.vocab_size, (2, 7))
    keep = np.arange(7)[None] < np.array([[7], [4]])
    out = oracle.causal_lm(ids, params, CONFIG, key_padding=keep)
    alone = oracle.causal_lm(ids[1:, :4], params, CONFIG)
    assert np.abs(out[1:, :4] - alone).max() < TOL


@spec("11.5")
def test_untied_head_and_learned_positions_layout() -> None:
    config = dataclasses.replace(CONFIG, tie_weights=False)
    params = init_params("causal_lm", config, DECODER_CANONICAL)
    assert "lm_head.weight" in params and "pos_embedding.weight" in params
    assert "pos_embedding.weight" not in init_params("causal_lm", config, LLAMA)
    module = ref.build("causal_lm", config, DECODER_CANONICAL)
    assert set(dict(module.named_parameters())) == set(params)


def test_n_kv_heads_must_divide_n_heads() -> None:
    with pytest.raises(ValueError, match="n_kv_heads=3 does not divide n_heads=4"):
        Config(n_heads=4, n_kv_heads=3)


# ------------------------------------------------------ §11.9 decoding regimes, the probes


@spec("11.9")
def test_schedule_feeds_a_prefill_then_chunks() -> None:
    assert schedule(11, 4) == [(0, 4), *((t, t + 1) for t in range(4, 11))]
    assert schedule(11, 1, 2) == [(0, 1), (1, 3), (3, 5), (5, 7), (7, 9), (9, 11)]
    assert schedule(11, 3, 4) == [(0, 3), (3, 7), (7, 11)]
    assert schedule(6, 3, 4) == [(0, 3), (3, 6)]  # the last call takes what is left


@spec("11.6", "11.9")
@pytest.mark.parametrize(
    "name", ["causal_self_attention[rope]", "decoder_block[llama]", "causal_lm"]
)
@pytest.mark.parametrize("give_positions", [True, False], ids=["positions", "own_positions"])
def test_reference_chunked_decoding_equals_full_forward(name: str, give_positions: bool) -> None:
    subject, handle, _, inputs = _run(name, Shape(batch=2, lq=10, masked=False))
    assert subject.derives_positions
    full = adapter.run(handle, {k: v for k, v in inputs.items() if k != "positions"})
    for prefill, chunk in ((1, 3), (4, 2)):
        outs, ranges = decode(
            adapter,
            handle,
            subject.component,
            inputs,
            prefill,
            chunk,
            give_positions=give_positions,
        )
        assert ranges == schedule(10, prefill, chunk)
        assert np.abs(np.concatenate(outs, axis=1) - full).max() < TOL


def _mutant(name: str):
    mutant = importlib.import_module(f"tck.adapters.mutants.{name}").adapter
    subject = mutant.subjects()[0]
    config = Config(d_model=16, n_heads=2, d_ff=24, vocab_size=23, max_len=64)
    handle = mutant.build(subject, config, seed=0)
    inputs = make_inputs(subject.component, config, np.random.default_rng(0), Shape(lq=9))
    return mutant, subject, handle, {k: v for k, v in inputs.items() if k == "x"}


def _decoded(mutant, subject, handle, inputs, prefill, chunk, give_positions=True):
    outs, _ = decode(
        mutant, handle, subject.component, inputs, prefill, chunk, give_positions=give_positions
    )
    return np.concatenate(outs, axis=1)


@spec("11.9")
def test_chunk_mask_mutant_is_right_one_token_at_a_time_only() -> None:
    mutant, subject, handle, inputs = _mutant("cache_chunk_top_left")
    full = mutant.run(handle, inputs)
    assert np.abs(_decoded(mutant, subject, handle, inputs, 4, 1) - full).max() < TOL
    assert np.abs(_decoded(mutant, subject, handle, inputs, 1, 2) - full).max() > 1e-3


@spec("11.9")
def test_restarting_mutant_is_right_whenever_given_positions() -> None:
    mutant, subject, handle, inputs = _mutant("cache_positions_restart")
    assert subject.derives_positions
    full = mutant.run(handle, inputs)
    given = _decoded(mutant, subject, handle, inputs, 1, 2)
    own = _decoded(mutant, subject, handle, inputs, 1, 2, give_positions=False)
    assert np.abs(given - full).max() < TOL and np.abs(own - full).max() > 1e-3


@spec("11.9", "10.1")
def test_cache_not_reset_mutant_leaks_only_into_a_forward_after_steps() -> None:
    mutant, subject, handle, inputs = _mutant("cache_not_reset")
    before = mutant.run(handle, inputs)
    assert np.abs(mutant.run(handle, inputs) - before).max() == 0.0
    assert np.abs(_decoded(mutant, subject, handle, inputs, 4, 1) - before).max() < TOL
    assert np.abs(mutant.run(handle, inputs) - before).max() > 1e-3


@spec("3.1", "11.1", "11.4")
@pytest.mark.parametrize("conv", [DECODER_CANONICAL, LLAMA], ids=["learned", "rope"])
@pytest.mark.parametrize("block", [False, True], ids=["attention", "pre_ln_block"])
def test_two_key_probe_reads_the_scale_off_the_oracle(conv, block: bool) -> None:
    """The probe's weights give the second token scores (s, 0) per head, so its two output
    channels are (sigmoid(s / sqrt(d_k)), s (1 - sigmoid(s / sqrt(d_k)))) (SPEC.md §3.1)."""
    config = Config(d_model=24, n_heads=3, d_ff=40)
    component = "decoder_block" if block else "causal_self_attention"
    params = {k: np.zeros_like(v) for k, v in init_params(component, config, conv).items()}
    x = probe_tokens(config.d_model, config.n_heads)
    seen = x
    if block:
        for name in ("norm1.weight", "norm2.weight"):
            params[name] = np.ones(config.d_model)
        seen = oracle.norm(x, params, "norm1.", conv)
    prefix = "self_attn." if block else ""
    for score in (0.5, 2.0):
        for name, value in two_key_weights(config, conv, seen, score).items():
            params[prefix + name] = value
        out = expected(component, {"x": x[None]}, params, config, conv)[0]
        heads = (out - x if block else out)[1].reshape(config.n_heads, -1)
        w0 = 1.0 / (1.0 + np.exp(-score / np.sqrt(config.head_dim_k)))
        assert np.allclose(heads[:, 0], w0, atol=1e-12)
        assert np.allclose(heads[:, 1], 1.0 - w0, atol=1e-12)


@spec("10.10", "2.3", "11.1")
def test_rope_at_follows_the_rope_angle_hypothesis() -> None:
    """The per-row RoPE of the decoder-only reference forms its angles like ``rope``: in
    float64 (the careful run), or from 16-bit positions and frequencies under the
    ``rope_angles`` hypothesis, where positions 8188..8191 round to one float16 value."""
    x = torch.randn(1, 2, 4, 8, generator=torch.Generator().manual_seed(0)).half()
    positions = torch.arange(8188, 8192)[None]
    careful = ref.rope_at(x, positions, layout="half_split")
    with ref.computed_in_input_dtype("rope_angles"):
        rounded = ref.rope_at(x, positions, layout="half_split")
        assert torch.equal(rounded, ref.rope(x[0], positions[0], layout="half_split")[None])
    assert torch.equal(careful, ref.rope(x[0], positions[0], layout="half_split")[None])
    assert (careful.double() - rounded.double()).abs().max() > 0.1


def _causal_and_padding(keep_pad: np.ndarray) -> np.ndarray:
    length = keep_pad.shape[1]
    return np.tril(np.ones((length, length), bool))[None] & keep_pad[:, None, :]


@spec("11.6", "11.7")
@pytest.mark.parametrize("prefill, chunk", [(1, 1), (4, 1), (1, 2), (3, 4)])
def test_cached_keys_seen_by_the_spec_are_causal_and_padding(prefill: int, chunk: int) -> None:
    keep_pad = np.random.default_rng(prefill * 10 + chunk).random((3, 11)) > 0.3
    seen = cached_keys_seen(3, 11, schedule(11, prefill, chunk), keep_pad)
    assert np.array_equal(seen[:, 0], _causal_and_padding(keep_pad))
    unpadded = cached_keys_seen(3, 11, schedule(11, prefill, chunk), None)
    assert np.array_equal(
        unpadded[:, 0], np.broadcast_to(np.tril(np.ones((11, 11), bool)), (3, 11, 11))
    )


@spec("11.6")
def test_prepended_keys_show_only_under_a_chunk_or_padding() -> None:
    causal = np.tril(np.ones((11, 11), bool))
    one_token = cached_keys_seen(2, 11, schedule(11, 4, 1), None, prepend=True)
    assert np.array_equal(one_token[0, 0], causal)  # one query over every key: order unseen
    assert not np.array_equal(
        cached_keys_seen(2, 11, schedule(11, 1, 2), None, prepend=True)[0, 0], causal
    )
    keep_pad = np.arange(11)[None, :] >= np.array([[0], [4]])  # a left-padded second row
    padded = cached_keys_seen(2, 11, schedule(11, 4, 1), keep_pad, prepend=True)[:, 0]
    assert not np.array_equal(padded, _causal_and_padding(keep_pad))


def _left_padded_mutant(name: str):
    mutant = importlib.import_module(f"tck.adapters.mutants.{name}").adapter
    subject = mutant.subjects()[0]
    config = Config(d_model=16, n_heads=2, d_ff=24, vocab_size=23, max_len=64)
    handle = mutant.build(subject, config, seed=0)
    params = init_params(subject.component, config, subject.conventions, seed=1)
    mutant.load(handle, params)
    inputs = make_inputs(subject.component, config, np.random.default_rng(0), Shape(lq=9))
    keep_pad = np.arange(9)[None, :] >= np.array([[0], [3]])
    x = {"x": inputs["x"][:2], "key_padding": keep_pad}
    return mutant, subject, handle, params, config, x


@spec("11.6", "11.7")
@pytest.mark.parametrize(
    "name, prefill, chunk, how",
    [
        ("cache_keys_prepended", 1, 2, {"prepend": True}),
        ("cache_keys_prepended", 4, 1, {"prepend": True}),
        ("cache_padding_dropped", 1, 1, {"pad_in_steps": False}),
        ("cache_padding_dropped", 3, 4, {"pad_in_steps": False}),
    ],
)
def test_cache_hypothesis_reproduces_its_mutant(name, prefill, chunk, how) -> None:
    """The per-query key sets of a hypothesis, fed to the oracle, give the mutant's cached
    rows of real tokens (float64: a few ulps), and differ from the spec's there."""
    mutant, subject, handle, params, config, x = _left_padded_mutant(name)
    decoded = _decoded(mutant, subject, handle, x, prefill, chunk)
    ranges = schedule(9, prefill, chunk)
    keep = cached_keys_seen(2, 9, ranges, x["key_padding"], **how)
    gold = decoder_only(
        subject.component, {"x": x["x"]}, params, config, subject.conventions, causal_keep=keep
    )
    spec_out = decoder_only(subject.component, x, params, config, subject.conventions)
    real = np.broadcast_to(x["key_padding"][:, :, None], decoded.shape).copy()
    real[:, :prefill] = False
    assert np.abs(decoded - gold)[real].max() < TOL
    assert np.abs(decoded - spec_out)[real].max() > 1e-3


@spec("11.6", "2.3")
def test_keys_rotated_within_the_call_reproduce_their_mutant() -> None:
    """Keys of each cached call rotated from 0 and queries at their positions: the oracle
    given those key positions gives the mutant's decoded rows, the spec does not; with the
    key positions equal to the positions it is the spec."""
    mutant = importlib.import_module("tck.adapters.mutants.cache_rope_keys_offset").adapter
    subject = mutant.subjects()[0]
    config = Config(d_model=16, n_heads=2, d_ff=24, vocab_size=23, max_len=64)
    handle = mutant.build(subject, config, seed=0)
    params = init_params(subject.component, config, subject.conventions, seed=1)
    mutant.load(handle, params)
    inputs = make_inputs(subject.component, config, np.random.default_rng(0), Shape(lq=9))
    x = {"x": inputs["x"], "positions": np.broadcast_to(np.arange(9), (inputs["x"].shape[0], 9))}
    conv = subject.conventions
    for prefill, chunk in ((4, 1), (1, 3)):
        decoded = _decoded(mutant, subject, handle, x, prefill, chunk)[:, prefill:]
        key_positions = np.array(x["positions"])
        for start, stop in schedule(9, prefill, chunk)[1:]:
            key_positions[:, start:stop] = np.arange(stop - start)
        gold = decoder_only(
            subject.component, x, params, config, conv, key_positions=key_positions
        )[:, prefill:]
        spec_out = decoder_only(subject.component, x, params, config, conv)
        same_positions = decoder_only(
            subject.component, x, params, config, conv, key_positions=x["positions"]
        )
        assert np.abs(decoded - gold).max() < TOL
        assert np.abs(decoded - spec_out[:, prefill:]).max() > 1e-3
        assert np.array_equal(same_positions, spec_out)


def test_constant_offsets_are_only_those_the_calls_tell_from_the_spec() -> None:
    # prefill 2, then one token per call up to 6 tokens: the cache holds 2..5 keys
    ranges = [(0, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
    found = dict(constant_offsets(ranges, 6))
    # an offset of 5 or more is the spec here (each query already sees every key written)
    assert sorted(found) == [1, 2, 3, 4]
    keep = found[3]
    assert keep[5].tolist() == [True, True, True, True, False, False]  # keys 0..3 of 0..5
    assert keep[3].tolist() == [True, True, True, True, False, False]  # all it has: 0..3
    assert keep[:2].tolist() == np.tril(np.ones((2, 6), bool)).tolist()  # the prefill's own
    # a chunk of three on a cache of 2: query i sees keys 0..o + i, never past its chunk
    chunked = dict(constant_offsets([(0, 2), (2, 5)], 5))
    assert chunked[1][2].tolist() == [True, True, False, False, False]
    assert chunked[1][4].tolist() == [True, True, True, True, False]


def test_derives_positions_takes_the_two_sources_and_nothing_else():
    for value in (False, True, "cache", "padding"):
        Subject("lm", "causal_lm", derives_positions=value)
    with pytest.raises(ValueError, match=r"derives_positions='mask'; choose False, True"):
        Subject("lm", "causal_lm", derives_positions="mask")
