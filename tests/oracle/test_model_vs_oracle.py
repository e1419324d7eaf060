"""The PyTorch reference model and the numpy oracle agree to 1e-12 in float64.

Two independent implementations of SPEC.md check each other: every component is built with
``model.build``, loaded with the oracle's canonical parameters (``params.init_params``) and
run on the same hypothesis-drawn inputs, under hypothesis-drawn sizes and conventions. NaN
positions (the 'nan'/'undefined' fully-masked-row policies) must coincide exactly.
"""

from __future__ import annotations

from typing import Literal, get_args, get_origin, get_type_hints

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tck.reference import (
    Config,
    Conventions,
    init_params,
    model,
    oracle,
    param_count,
    param_shapes,
)
from tck.reference.params import COMPONENTS

spec = pytest.mark.spec
ATOL = 1e-12

seeds = st.integers(0, 2**32 - 1)
batches = st.integers(1, 3)
lengths = st.sampled_from([1, 2, 3, 5, 7])  # 1 and 3 on purpose; Lq != Lk drawn separately
mask_kinds = st.sampled_from(["none", "padding", "causal", "causal+padding", "random"])


@st.composite
def configs(draw: st.DrawFn) -> Config:
    """Small sizes; sometimes d_k != d_v given explicitly (then H * d_k need not be D)."""
    d_model = draw(st.sampled_from([8, 12, 16, 24]))
    n_heads = draw(st.sampled_from([h for h in (1, 2, 3, 4, 6) if d_model % h == 0]))
    explicit = draw(st.booleans())
    patch, grid = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    return Config(
        d_model=d_model,
        n_heads=n_heads,
        d_k=draw(st.integers(1, 6)) if explicit else None,
        d_v=draw(st.integers(1, 6)) if explicit else None,
        d_ff=draw(st.integers(1, 20)),
        n_layers=draw(st.integers(1, 2)),
        n_decoder_layers=draw(st.integers(1, 2)),
        vocab_size=draw(st.integers(3, 12)),
        padding_idx=draw(st.none() | st.integers(0, 2)),
        max_len=7,
        tie_weights=draw(st.booleans()),
        bias=draw(st.booleans()),
        image_size=patch * grid,
        patch_size=patch,
        channels=draw(st.integers(1, 3)),
        n_classes=draw(st.integers(1, 4)),
    )


def _conventions() -> st.SearchStrategy[Conventions]:
    """Every Literal-typed field of Conventions drawn from all of its values."""
    hints = get_type_hints(Conventions)
    choices = {
        name: st.sampled_from(get_args(hint))
        for name, hint in hints.items()
        if get_origin(hint) is Literal
    }
    return st.builds(
        Conventions,
        eps=st.sampled_from([1e-5, 1e-2]),
        pe_base=st.sampled_from([10000.0, 100.0]),
        **choices,
    )


conventions = _conventions()


# ------------------------------------------------------------------------------- helpers


def assert_matches(got: torch.Tensor, expected: np.ndarray, atol: float = ATOL) -> None:
    """Same shape, NaN at exactly the same positions, and max |got - expected| <= atol."""
    got_np = got.detach().cpu().numpy()
    assert got_np.dtype == np.float64, got_np.dtype
    assert got_np.shape == expected.shape, (got_np.shape, expected.shape)
    nan_got, nan_expected = np.isnan(got_np), np.isnan(expected)
    np.testing.assert_array_equal(nan_got, nan_expected, err_msg="NaN positions differ")
    diff = np.abs(got_np - expected)[~nan_expected]
    worst = diff.max(initial=0.0)
    assert worst <= atol, f"max |model - oracle| = {worst:.3e} > {atol:.0e}"


def t(x: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(x)


def loaded(
    component: str, config: Config, conv: Conventions | None, seed: int
) -> tuple[torch.nn.Module, dict[str, np.ndarray]]:
    """A model component loaded with the oracle's canonical parameters."""
    params = init_params(component, config, conv, seed=seed)
    module = model.build(component, config, conv)
    model.load_canonical(module, params)
    return module.eval(), params


def keep_mask(
    rng: np.random.Generator, kind: str, b: int, lq: int, lk: int, alignment: str = "top_left"
) -> np.ndarray | None:
    """A boolean keep-mask broadcastable to (B, H, Lq, Lk); padding lengths may be 0."""
    padding = np.arange(lk)[None, :] < rng.integers(0, lk + 1, size=b)[:, None]  # (B, Lk)
    causal = oracle.causal_keep_mask(lq, lk, alignment)  # (Lq, Lk)
    return {
        "none": None,
        "padding": oracle.key_padding(padding),  # (B, 1, 1, Lk)
        "causal": causal,  # (Lq, Lk)
        "causal+padding": oracle.key_padding(padding) & causal,  # (B, 1, Lq, Lk)
        "random": rng.random((b, 1, lq, lk)) < 0.6,  # (B, 1, Lq, Lk)
    }[kind]


def maybe_t(mask: np.ndarray | None) -> torch.Tensor | None:
    return None if mask is None else t(mask)


def token_ids(rng: np.random.Generator, config: Config, b: int, length: int) -> np.ndarray:
    """Random ids (padding_idx may occur anywhere) with each row padded at its end."""
    ids = rng.integers(0, config.vocab_size, size=(b, length))
    if config.padding_idx is not None:
        ends = rng.integers(0, length + 1, size=b)
        ids[np.arange(length)[None, :] >= ends[:, None]] = config.padding_idx
    return ids


# ------------------------------------------------------------------------ canonical params


@spec("0.2", "8.3", "10.3")
@pytest.mark.parametrize("component", COMPONENTS)
@settings(max_examples=5)
@given(config=configs(), conv=conventions, seed=seeds)
def test_canonical_names_shapes_and_round_trip(component, config, conv, seed):
    module = model.build(component, config, conv)
    exported = model.canonical_params(module)
    assert {k: v.shape for k, v in exported.items()} == param_shapes(component, config, conv)
    assert all(v.dtype == np.float64 for v in exported.values())
    assert sum(p.numel() for p in module.parameters()) == param_count(component, config, conv)
    params = init_params(component, config, conv, seed=seed)
    model.load_canonical(module, params)
    round_trip = model.canonical_params(module)
    assert round_trip.keys() == params.keys()
    for name, value in params.items():
        np.testing.assert_array_equal(round_trip[name], value, err_msg=name)


# ------------------------------------------------------------------- functional pieces


@spec("3.1", "4.1", "4.2", "4.3", "4.4")
@settings(max_examples=60)
@given(
    b=batches,
    h=st.integers(1, 3),
    lq=lengths,
    lk=lengths,
    d_k=st.integers(1, 6),
    d_v=st.integers(1, 6),
    kind=mask_kinds,
    alignment=st.sampled_from(["top_left", "bottom_right"]),
    scale=st.none() | st.floats(0.1, 2.0),
    policy=st.sampled_from(["zero", "nan", "uniform", "undefined"]),
    seed=seeds,
)
def test_attention_matches_oracle(b, h, lq, lk, d_k, d_v, kind, alignment, scale, policy, seed):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((b, h, lq, d_k)), rng.standard_normal((b, h, lk, d_k))
    v = rng.standard_normal((b, h, lk, d_v))
    keep = keep_mask(rng, kind, b, lq, lk, alignment)
    expected = oracle.scaled_dot_product_attention(
        q, k, v, keep, scale=scale, fully_masked_rows=policy
    )
    got = model.scaled_dot_product_attention(t(q), t(k), t(v), maybe_t(keep), scale, policy)
    assert_matches(got, expected)


@spec("4.2", "4.3")
@given(
    lq=st.integers(1, 9),
    lk=st.integers(1, 9),
    alignment=st.sampled_from(["top_left", "bottom_right"]),
    seed=seeds,
)
def test_masks_match_oracle(lq, lk, alignment, seed):
    got = model.causal_keep_mask(lq, lk, alignment).numpy()
    np.testing.assert_array_equal(got, oracle.causal_keep_mask(lq, lk, alignment))
    padding = np.random.default_rng(seed).random((3, lk)) < 0.5
    np.testing.assert_array_equal(
        model.key_padding(t(padding)).numpy(), oracle.key_padding(padding)
    )


@spec("2.1")
@given(
    length=st.integers(1, 64),
    half_d=st.integers(1, 16),
    base=st.sampled_from([10000.0, 100.0]),
    layout=st.sampled_from(["interleaved", "concatenated"]),
)
def test_sinusoidal_pe_matches_oracle(length, half_d, base, layout):
    conv = Conventions(pe_base=base, pe_layout=layout)
    module = model.build("sinusoidal_pe", Config(d_model=2 * half_d, n_heads=1), conv)
    expected = oracle.sinusoidal_pe(length, 2 * half_d, base=base, layout=layout)
    assert_matches(module(length), expected)


@spec("2.3")
@given(
    lead=st.sampled_from([(), (2,), (2, 3)]),
    length=lengths,
    half_d=st.integers(1, 8),
    base=st.sampled_from([10000.0, 100.0]),
    layout=st.sampled_from(["interleaved", "half_split"]),
    explicit_positions=st.booleans(),
    seed=seeds,
)
def test_rope_matches_oracle(lead, length, half_d, base, layout, explicit_positions, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((*lead, length, 2 * half_d))
    positions = rng.integers(0, 1000, size=length) if explicit_positions else None
    module = model.build("rope", Config(), Conventions(pe_base=base, rope_layout=layout))
    expected = oracle.rope(x, positions, base=base, layout=layout)
    assert_matches(module(t(x), None if positions is None else t(positions)), expected)


@spec("1.1", "1.3")
@given(config=configs(), b=batches, length=lengths, seed=seeds)
def test_embedding_matches_oracle(config, b, length, seed):
    module, params = loaded("embedding", config, None, seed)
    ids = token_ids(np.random.default_rng(seed), config, b, length)
    assert_matches(module(t(ids)), oracle.embedding(ids, params["weight"]))
    if config.padding_idx is not None:  # §1.3: the padding row starts at zero
        assert not model.build("embedding", config).weight[config.padding_idx].any()


# ---------------------------------------------------------------------------- layers


@spec("5.1", "5.2")
@given(config=configs(), conv=conventions, b=batches, length=lengths, seed=seeds)
def test_layer_norm_matches_oracle(config, conv, b, length, seed):
    module, params = loaded("layer_norm", config, conv, seed)
    rng = np.random.default_rng(seed)
    # rows of very different spread, so that eps placement and variance matter
    x = rng.standard_normal((b, length, config.d_model)) * 10.0 ** rng.uniform(
        -3, 2, (b, length, 1)
    )
    expected = oracle.layer_norm(
        x,
        params["weight"],
        params["bias"],
        eps=conv.eps,
        eps_placement=conv.eps_placement,
        variance=conv.variance,
    )
    assert_matches(module(t(x)), expected)


@spec("5.3")
@given(config=configs(), conv=conventions, b=batches, length=lengths, seed=seeds)
def test_rms_norm_matches_oracle(config, conv, b, length, seed):
    module, params = loaded("rms_norm", config, conv, seed)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, length, config.d_model)) * 10.0 ** rng.uniform(
        -3, 2, (b, length, 1)
    )
    assert_matches(module(t(x)), oracle.rms_norm(x, params["weight"], eps=conv.eps))


@spec("5.4")
@given(config=configs(), conv=conventions, b=batches, length=lengths, seed=seeds)
def test_scale_norm_matches_oracle(config, conv, b, length, seed):
    module, params = loaded("scale_norm", config, conv, seed)
    rng = np.random.default_rng(seed)
    # row norms from far below eps (the clamp) to far above it
    x = rng.standard_normal((b, length, config.d_model)) * 10.0 ** rng.uniform(
        -9, 2, (b, length, 1)
    )
    assert_matches(module(t(x)), oracle.scale_norm(x, params["weight"], eps=conv.eps))


@spec("6.1")
@given(config=configs(), conv=conventions, b=batches, length=lengths, seed=seeds)
def test_ffn_matches_oracle(config, conv, b, length, seed):
    module, params = loaded("ffn", config, conv, seed)
    x = np.random.default_rng(seed).standard_normal((b, length, config.d_model))
    assert_matches(module(t(x)), oracle.feed_forward(x, params, activation=conv.activation))


@spec("3.3", "3.4", "3.5", "4.1", "4.2", "4.3", "4.4")
@settings(max_examples=60)
@given(
    config=configs(),
    conv=conventions,
    b=batches,
    lq=lengths,
    lk=lengths,
    kind=mask_kinds,
    seed=seeds,
)
def test_mha_matches_oracle(config, conv, b, lq, lk, kind, seed):
    module, params = loaded("mha", config, conv, seed)
    rng = np.random.default_rng(seed)
    query = rng.standard_normal((b, lq, config.d_model))
    key, value = rng.standard_normal((2, b, lk, config.d_model))  # §3.5: another sequence
    keep = keep_mask(rng, kind, b, lq, lk, conv.causal_alignment)
    expected = oracle.multi_head_attention(
        query, key, value, params, n_heads=config.n_heads, keep_mask=keep, conventions=conv
    )
    assert_matches(module(t(query), t(key), t(value), maybe_t(keep)), expected)


@spec("7.1", "5.2", "5.3", "6.1", "4.2", "4.4")
@given(config=configs(), conv=conventions, b=batches, length=lengths, kind=mask_kinds, seed=seeds)
def test_encoder_layer_matches_oracle(config, conv, b, length, kind, seed):
    module, params = loaded("encoder_layer", config, conv, seed)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, length, config.d_model))
    keep = keep_mask(rng, kind, b, length, length, conv.causal_alignment)
    expected = oracle.encoder_layer(
        x, params, n_heads=config.n_heads, keep_mask=keep, conventions=conv
    )
    assert_matches(module(t(x), maybe_t(keep)), expected)


def _decoder_masks(rng, conv, b, lt, ls):
    self_keep = keep_mask(rng, "causal+padding", b, lt, lt, conv.causal_alignment)
    memory_keep = keep_mask(rng, "padding", b, lt, ls)
    return self_keep, memory_keep


@spec("7.2", "3.5", "4.3", "4.4")
@given(config=configs(), conv=conventions, b=batches, lt=lengths, ls=lengths, seed=seeds)
def test_decoder_layer_matches_oracle(config, conv, b, lt, ls, seed):
    module, params = loaded("decoder_layer", config, conv, seed)
    rng = np.random.default_rng(seed)
    x, memory = (
        rng.standard_normal((b, lt, config.d_model)),
        rng.standard_normal((b, ls, config.d_model)),
    )
    self_keep, memory_keep = _decoder_masks(rng, conv, b, lt, ls)
    expected = oracle.decoder_layer(
        x,
        memory,
        params,
        n_heads=config.n_heads,
        self_keep_mask=self_keep,
        memory_keep_mask=memory_keep,
        conventions=conv,
    )
    assert_matches(module(t(x), t(memory), t(self_keep), t(memory_keep)), expected)


@spec("7.3")
@settings(max_examples=25)
@given(config=configs(), conv=conventions, b=batches, lt=lengths, ls=lengths, seed=seeds)
def test_stacks_match_oracle(config, conv, b, lt, ls, seed):
    rng = np.random.default_rng(seed)
    src, tgt = (
        rng.standard_normal((b, ls, config.d_model)),
        rng.standard_normal((b, lt, config.d_model)),
    )
    src_keep = keep_mask(rng, "padding", b, ls, ls)
    encoder, enc_params = loaded("encoder", config, conv, seed)
    memory = oracle.encoder(src, enc_params, config, keep_mask=src_keep, conventions=conv)
    assert_matches(encoder(t(src), t(src_keep)), memory)

    decoder, dec_params = loaded("decoder", config, conv, seed + 1)
    self_keep, memory_keep = _decoder_masks(rng, conv, b, lt, ls)
    expected = oracle.decoder(
        tgt,
        memory,
        dec_params,
        config,
        self_keep_mask=self_keep,
        memory_keep_mask=memory_keep,
        conventions=conv,
    )
    assert_matches(decoder(t(tgt), t(memory), t(self_keep), t(memory_keep)), expected)


# ---------------------------------------------------------------------------- models


@spec("8.1", "8.2", "8.3", "1.2", "1.3", "2.1", "4.2", "4.3", "4.4")
@settings(max_examples=30)
@given(config=configs(), conv=conventions, b=batches, ls=lengths, lt=lengths, seed=seeds)
def test_seq2seq_matches_oracle(config, conv, b, ls, lt, seed):
    module, params = loaded("seq2seq", config, conv, seed)
    rng = np.random.default_rng(seed)
    src, tgt = token_ids(rng, config, b, ls), token_ids(rng, config, b, lt)
    expected = oracle.seq2seq(src, tgt, params, config, conventions=conv)
    assert_matches(module(t(src), t(tgt)), expected)


@spec("9.1")
@given(
    config=configs(), b=batches, grid=st.tuples(st.integers(1, 3), st.integers(1, 3)), seed=seeds
)
def test_patch_embed_matches_oracle(config, b, grid, seed):
    module, params = loaded("patch_embed", config, None, seed)
    p = config.patch_size
    images = np.random.default_rng(seed).standard_normal(
        (b, config.channels, grid[0] * p, grid[1] * p)
    )
    expected = oracle.patch_embed(images, params["weight"], params["bias"], patch_size=p)
    assert_matches(module(t(images)), expected)


@spec("9.1", "9.2", "9.3", "2.5", "9.4", "9.5")
@settings(max_examples=30)
@given(config=configs(), conv=conventions, b=batches, seed=seeds)
def test_vit_matches_oracle(config, conv, b, seed):
    module, params = loaded("vit", config, conv, seed)
    s = config.image_size
    images = np.random.default_rng(seed).standard_normal((b, config.channels, s, s))
    assert_matches(module(t(images)), oracle.vit(images, params, config, conventions=conv))


@spec("10.1")
@pytest.mark.parametrize("component", ["seq2seq", "vit"])
def test_dropout_is_identity_in_eval_and_eval_is_deterministic(component):
    config = Config(
        d_model=8, n_heads=2, d_ff=8, vocab_size=9, max_len=8, image_size=4, patch_size=2
    )
    params = init_params(component, config, seed=0)
    module = model.build(component, config, dropout=0.5)
    model.load_canonical(module, params)
    rng = np.random.default_rng(0)
    if component == "seq2seq":
        inputs = (token_ids(rng, config, 2, 5), token_ids(rng, config, 2, 4))
        expected = oracle.seq2seq(*inputs, params, config)
    else:
        inputs = (rng.standard_normal((2, config.channels, 4, 4)),)
        expected = oracle.vit(*inputs, params, config)
    module.eval()
    first = module(*map(t, inputs))
    assert_matches(first, expected)
    # the same instance, reused after a call with other shapes, gives the identical output
    if component == "seq2seq":
        module(t(token_ids(rng, config, 3, 2)), t(token_ids(rng, config, 3, 7)))
    else:
        module(t(rng.standard_normal((1, config.channels, 4, 4))))
    assert torch.equal(module(*map(t, inputs)), first)
    module.train()  # and the dropout is really there: active in training mode
    torch.manual_seed(0)
    assert np.abs(module(*map(t, inputs)).detach().numpy() - expected).max() > 1e-6


# ---------------------------------------------------------------------------- errors


SMALL = Config(d_model=8, n_heads=2, d_ff=8, vocab_size=6, max_len=4, image_size=4, patch_size=2)


def _mha_call(keep):
    module, _ = loaded("mha", SMALL, None, 0)
    x = torch.zeros(2, 3, 8, dtype=torch.float64)
    return module(x, x, x, keep)


def _oracle_mha_call(keep):
    x = np.zeros((2, 3, 8))
    params = init_params("mha", SMALL, seed=0)
    return oracle.multi_head_attention(x, x, x, params, n_heads=2, keep_mask=keep)


@spec("4.1", "10.6")
@pytest.mark.parametrize(
    ("keep", "message"),
    [
        (np.ones((2, 1, 1, 3)), "boolean"),  # a float mask, not a keep-mask
        (np.zeros((2, 1, 1, 3), dtype=np.int64), "boolean"),
        (np.ones((2, 3, 3), dtype=bool), "ambiguous"),  # (B, Lq, Lk): which axis is heads?
        (np.ones((2, 3), dtype=bool), "broadcast"),  # (B, Lk) is read as (Lq, Lk)
        (np.ones((2, 1, 1, 4), dtype=bool), "broadcast"),  # wrong Lk
        (np.ones((3, 1, 3, 3), dtype=bool), "broadcast"),  # wrong batch
        (np.ones((4, 3), dtype=bool), "broadcast"),  # wrong Lq
    ],
)
def test_bad_keep_masks_are_errors(keep, message):
    with pytest.raises(ValueError, match=message):
        _mha_call(t(keep))
    with pytest.raises(ValueError, match=message):
        _oracle_mha_call(keep)


@spec("1.1", "10.6")
@pytest.mark.parametrize("bad_id", [-1, 6, 100])
def test_token_ids_out_of_range_are_errors(bad_id):
    module, params = loaded("seq2seq", SMALL, None, 0)
    src, tgt = np.array([[1, 2, bad_id]]), np.array([[1, 2]])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        module(t(src), t(tgt))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        oracle.seq2seq(src, tgt, params, SMALL)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.build("embedding", SMALL)(t(src))


@spec("1.1", "10.6")
def test_float_token_ids_are_an_error():
    with pytest.raises(ValueError, match="integers"):
        model.build("embedding", SMALL)(torch.zeros(1, 2, dtype=torch.float64))


@spec("2.2", "8.1", "10.6")
def test_sequence_longer_than_max_len_is_an_error():
    module, params = loaded("seq2seq", SMALL, None, 0)
    ok, too_long = np.ones((1, 4), dtype=np.int64), np.ones((1, 5), dtype=np.int64)
    module(t(ok), t(ok))
    for src, tgt in [(too_long, ok), (ok, too_long)]:
        with pytest.raises(ValueError, match="max_len"):
            module(t(src), t(tgt))
        with pytest.raises(ValueError, match="max_len"):
            oracle.seq2seq(src, tgt, params, SMALL)
    with pytest.raises(ValueError, match="max_len"):
        model.build("sinusoidal_pe", SMALL)(5)


@spec("2.1", "2.3", "10.6")
def test_odd_widths_for_pe_and_rope_are_errors():
    with pytest.raises(ValueError, match="even width"):
        model.sinusoidal_pe(4, 7)
    with pytest.raises(ValueError, match="even width"):
        model.rope(torch.zeros(3, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="positions"):
        model.rope(torch.zeros(3, 4, dtype=torch.float64), torch.arange(4))


@spec("9.1", "2.5", "10.6")
@pytest.mark.parametrize(
    "shape", [(1, 3, 5, 4), (1, 3, 4, 6), (1, 3, 8, 8), (1, 2, 4, 4), (3, 4, 4)]
)
def test_images_of_the_wrong_size_are_errors(shape):
    module, params = loaded("vit", SMALL, None, 0)
    images = np.zeros(shape)
    with pytest.raises(ValueError, match="images must have shape"):
        module(t(images))
    with pytest.raises(ValueError, match="images must have shape"):
        oracle.vit(images, params, SMALL)


@spec("9.1", "10.6")
def test_patch_embed_rejects_sizes_not_divisible_by_the_patch():
    module, params = loaded("patch_embed", SMALL, None, 0)
    images = np.zeros((1, 3, 5, 4))
    with pytest.raises(ValueError, match="not divisible by the patch size"):
        module(t(images))
    with pytest.raises(ValueError, match="not divisible by the patch size"):
        oracle.patch_embed(images, params["weight"], params["bias"], patch_size=2)


@spec("3.4", "10.6")
def test_load_canonical_names_every_problem():
    module = model.build("mha", SMALL)
    params = init_params("mha", SMALL, seed=0)
    params.pop("q.bias")
    params["k.weight"] = params["k.weight"][:, :3]
    params["extra.weight"] = np.zeros(2)
    with pytest.raises(ValueError) as error:
        model.load_canonical(module, params)
    assert "missing q.bias" in str(error.value)
    assert "unexpected extra.weight" in str(error.value)
    assert "k.weight has shape (8, 3), expected (8, 8)" in str(error.value)


@spec("10.6")
def test_unknown_component_is_an_error():
    with pytest.raises(ValueError, match="unknown component"):
        model.build("transformer_xl", SMALL)
