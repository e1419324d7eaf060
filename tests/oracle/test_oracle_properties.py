"""The oracle satisfies the properties its own clauses promise (hypothesis-drawn inputs)."""

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tck.reference import CANONICAL, Config, Conventions, init_params, oracle

spec = pytest.mark.spec

seeds = st.integers(0, 2**32 - 1)
even_dims = st.integers(1, 32).map(lambda n: 2 * n)


def rng(seed):
    return np.random.default_rng(seed)


@spec("2.2")
@given(
    d=even_dims,
    length=st.integers(1, 200),
    base=st.sampled_from([100.0, 10000.0]),
    layout=st.sampled_from(["interleaved", "concatenated"]),
)
def test_pe_bounded_deterministic_and_distinct(d, length, base, layout):
    pe = oracle.sinusoidal_pe(length, d, base=base, layout=layout)
    assert pe.shape == (length, d)
    assert np.all(np.abs(pe) <= 1.0)
    np.testing.assert_array_equal(pe, oracle.sinusoidal_pe(length, d, base=base, layout=layout))
    if length > 1:
        gaps = np.linalg.norm(pe[:, None, :] - pe[None, :, :], axis=-1)
        assert gaps[~np.eye(length, dtype=bool)].min() > 1e-6


@spec("2.2")
@given(
    d=even_dims,
    t=st.integers(0, 500),
    k=st.integers(0, 500),
    layout=st.sampled_from(["interleaved", "concatenated"]),
)
def test_pe_dot_product_depends_only_on_offset_and_is_symmetric(d, t, k, layout):
    pe = oracle.sinusoidal_pe(t + 2 * k + 1, d, layout=layout)
    omega = 10000.0 ** (-np.arange(0, d, 2) / d)
    expected = np.cos(k * omega).sum()  # sum_i cos(k w_i), independent of t
    np.testing.assert_allclose(pe[t] @ pe[t + k], expected, atol=1e-9)
    if t >= k:
        np.testing.assert_allclose(pe[t] @ pe[t + k], pe[t] @ pe[t - k], atol=1e-9)
    # and the same value at another start position
    np.testing.assert_allclose(pe[k] @ pe[2 * k], expected, atol=1e-9)


@spec("2.2")
def test_pe_beyond_max_len_is_an_error():
    oracle.sinusoidal_pe(8, 4, max_len=8)
    with pytest.raises(ValueError, match="max_len"):
        oracle.sinusoidal_pe(9, 4, max_len=8)


@spec("2.4")
@given(
    d=even_dims,
    length=st.integers(1, 40),
    seed=seeds,
    layout=st.sampled_from(["interleaved", "half_split"]),
)
def test_rope_preserves_norms_and_is_identity_at_position_0(d, length, seed, layout):
    x = rng(seed).standard_normal((2, length, d))
    out = oracle.rope(x, layout=layout)
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-12)
    np.testing.assert_allclose(out[:, 0], x[:, 0], rtol=0, atol=0)


@spec("2.4")
@given(
    d=even_dims,
    m=st.integers(0, 300),
    n=st.integers(0, 300),
    shift=st.integers(0, 300),
    seed=seeds,
    layout=st.sampled_from(["interleaved", "half_split"]),
)
def test_rope_dot_product_depends_only_on_offset(d, m, n, shift, seed, layout):
    q, k = rng(seed).standard_normal((2, 1, d))

    def dot(i, j):
        return oracle.rope(q, [i], layout=layout)[0] @ oracle.rope(k, [j], layout=layout)[0]

    np.testing.assert_allclose(dot(m, n), dot(m + shift, n + shift), atol=1e-9)


@spec("5.1", "5.2")
@given(
    d=st.integers(2, 64),
    seed=seeds,
    shift=st.floats(-100, 100),
    scale=st.floats(0.1, 100),
    eps_placement=st.sampled_from(["inside_sqrt", "outside_sqrt"]),
    variance=st.sampled_from(["biased", "unbiased"]),
)
def test_layer_norm_shift_and_scale_invariance(d, seed, shift, scale, eps_placement, variance):
    x = rng(seed).standard_normal((3, d))
    assume(np.all(x.std(axis=-1) > 1e-3))
    kw = {"eps_placement": eps_placement, "variance": variance}
    y = oracle.layer_norm(x, eps=0.0, **kw)
    np.testing.assert_allclose(oracle.layer_norm(x + shift, eps=0.0, **kw), y, atol=1e-9)
    np.testing.assert_allclose(oracle.layer_norm(x * scale, eps=0.0, **kw), y, atol=1e-9)
    if variance == "biased":  # zero mean, unit (biased) variance
        np.testing.assert_allclose(y.mean(axis=-1), 0.0, atol=1e-12)
        np.testing.assert_allclose(y.var(axis=-1), 1.0, rtol=1e-12)
    # With eps > 0 shift invariance stays exact; scale invariance only holds approximately.
    y_eps = oracle.layer_norm(x, eps=1e-5, **kw)
    np.testing.assert_allclose(oracle.layer_norm(x + shift, eps=1e-5, **kw), y_eps, atol=1e-9)


@spec("3.1")
@given(
    shape=st.tuples(st.integers(1, 3), st.integers(1, 9), st.integers(1, 9)),
    seed=seeds,
    magnitude=st.sampled_from([1.0, 30.0, 1e4]),
)
def test_softmax_rows_sum_to_one_even_at_large_magnitude(shape, seed, magnitude):
    x = rng(seed).standard_normal(shape) * magnitude
    p = oracle.softmax(x)
    assert np.all(np.isfinite(p)) and np.all(p >= 0)
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-12)


@st.composite
def attention_inputs(draw, masked=True):
    b, h = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    lq, lk = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    dk, dv = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    r = rng(draw(seeds))
    q, k = r.standard_normal((b, h, lq, dk)), r.standard_normal((b, h, lk, dk))
    v = r.standard_normal((b, h, lk, dv))
    lengths = r.integers(1, lk + 1, size=b)  # every row keeps at least one key
    keep = oracle.key_padding(oracle.padding_keep_mask(lengths, lk)) if masked else None
    return q, k, v, keep


@spec("3.1", "4.2")
@given(inputs=attention_inputs(), seed=seeds)
def test_attention_weights_rows_sum_to_one_and_masked_keys_do_not_matter(inputs, seed):
    q, k, v, keep = inputs
    w = oracle.attention_weights(q, k, keep)
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, rtol=1e-12)
    assert np.all(w[~np.broadcast_to(keep, w.shape)] == 0.0)
    # Padding invariance: change keys and values at masked positions, nothing changes.
    noise = rng(seed).standard_normal(k.shape) * 100
    masked_keys = ~np.broadcast_to(keep[:, :, 0, :, None], k.shape)
    k2, v2 = np.where(masked_keys, noise, k), v.copy()
    v2[~np.broadcast_to(keep[:, :, 0, :, None], v.shape)] = 1e6
    np.testing.assert_allclose(
        oracle.scaled_dot_product_attention(q, k2, v2, keep),
        oracle.scaled_dot_product_attention(q, k, v, keep),
        rtol=1e-12,
        atol=1e-12,
    )


@spec("4.3")
@given(
    inputs=attention_inputs(masked=False),
    seed=seeds,
    alignment=st.sampled_from(["top_left", "bottom_right"]),
)
def test_causal_attention_does_not_leak_the_future(inputs, seed, alignment):
    q, k, v, _ = inputs
    lq, lk = q.shape[-2], k.shape[-2]
    keep = oracle.causal_keep_mask(lq, lk, alignment)
    policy = "undefined" if not keep.any(axis=-1).all() else "zero"
    out = oracle.scaled_dot_product_attention(q, k, v, keep, fully_masked_rows=policy)
    # Perturb the last key: only rows allowed to see it may change.
    k2, v2 = k.copy(), v.copy()
    k2[..., -1, :] += rng(seed).standard_normal(k2.shape[-1]) * 5
    v2[..., -1, :] += 7.0
    out2 = oracle.scaled_dot_product_attention(q, k2, v2, keep, fully_masked_rows=policy)
    blind = ~keep[:, -1]
    np.testing.assert_array_equal(out[..., blind, :], out2[..., blind, :])


@spec("3.1")
@given(inputs=attention_inputs(), chunk=st.integers(1, 5))
def test_query_chunking_does_not_change_attention(inputs, chunk):
    q, k, v, keep = inputs
    whole = oracle.scaled_dot_product_attention(q, k, v, keep)
    saved, oracle.QUERY_CHUNK = oracle.QUERY_CHUNK, chunk
    try:
        chunked = oracle.scaled_dot_product_attention(q, k, v, keep)
    finally:
        oracle.QUERY_CHUNK = saved
    np.testing.assert_allclose(chunked, whole, rtol=1e-14, atol=1e-15)  # BLAS rounding only


@spec("3.2")
def test_scaled_scores_have_unit_variance():
    # seed 004: q.k of iid unit-variance components has variance d_k; / sqrt(d_k) -> 1.
    r = rng(0)
    for d_k in (16, 64, 256):
        q, k = r.standard_normal((2, 20000, d_k))
        raw = (q * k).sum(axis=-1)
        assert abs(raw.var() / d_k - 1.0) < 0.05
        assert abs((raw / math.sqrt(d_k)).var() - 1.0) < 0.05


@spec("6.2", "10.2")
@given(seed=seeds, b=st.integers(2, 4), length=st.integers(1, 9))
def test_ffn_is_position_wise_and_batch_rows_are_independent(seed, b, length):
    c = Config(d_model=8, n_heads=2, d_ff=16)
    params = init_params("ffn", c, seed=seed % 1000)
    x = rng(seed).standard_normal((b, length, 8))
    out = oracle.feed_forward(x, params)
    single = oracle.feed_forward(x[1:2, -1:], params)
    np.testing.assert_allclose(out[1:2, -1:], single, rtol=1e-13, atol=1e-13)
    enc = init_params("encoder", c, seed=seed % 1000)
    whole = oracle.encoder(x, enc, c)
    np.testing.assert_allclose(oracle.encoder(x[:1], enc, c), whole[:1], rtol=1e-12, atol=1e-12)


@spec("10.5", "7.1")
@given(seed=seeds, length=st.integers(2, 10), placement=st.sampled_from(["post", "pre"]))
def test_encoder_layer_is_permutation_equivariant_without_position_information(
    seed, length, placement
):
    c, conv = Config(d_model=8, n_heads=2, d_ff=16), Conventions(norm_placement=placement)
    params = init_params("encoder_layer", c, conv, seed=seed % 1000)
    r = rng(seed)
    x, perm = r.standard_normal((2, length, 8)), r.permutation(length)
    out = oracle.encoder_layer(x, params, n_heads=2, conventions=conv)
    permuted = oracle.encoder_layer(x[:, perm], params, n_heads=2, conventions=conv)
    np.testing.assert_allclose(permuted, out[:, perm], rtol=1e-12, atol=1e-12)


@spec("9.1")
@given(seed=seeds, p=st.sampled_from([1, 2, 4]), grid=st.integers(1, 3), channels=st.integers(1, 3))
def test_patch_embedding_equals_a_strided_convolution(seed, p, grid, channels):
    r = rng(seed)
    size, d = p * grid, 5
    images = r.standard_normal((2, channels, size, size))
    weight, bias = r.standard_normal((d, channels, p, p)), r.standard_normal(d)
    out = oracle.patch_embed(images, weight, bias, patch_size=p)
    conv = np.empty((2, d, grid, grid))  # direct convolution, kernel = stride = p
    for i in range(grid):
        for j in range(grid):
            window = images[:, :, i * p : (i + 1) * p, j * p : (j + 1) * p]
            conv[:, :, i, j] = np.einsum("bcyx,dcyx->bd", window, weight) + bias
    np.testing.assert_allclose(
        out, conv.reshape(2, d, -1).transpose(0, 2, 1), rtol=1e-12, atol=1e-12
    )


@spec("2.5", "9.2", "9.3", "9.5")
def test_vit_class_token_and_pooling():
    c = Config(d_model=8, n_heads=2, d_ff=16, n_layers=1, image_size=4, patch_size=2)
    params = init_params("vit", c, seed=3)
    images = rng(3).standard_normal((2, 3, 4, 4))
    cls_logits = oracle.vit(images, params, c)
    # The class token's own position embedding reaches the output: change it, logits change.
    # (A random change: a constant added to every feature would vanish in the LayerNorm.)
    moved = dict(params, pos_embed=params["pos_embed"].copy())
    moved["pos_embed"][0, 0] += rng(4).standard_normal(8)
    assert np.abs(oracle.vit(images, moved, c) - cls_logits).max() > 1e-3
    # Mean pooling averages the patch tokens, excluding the class token.
    mean_conv = Conventions(norm_placement="pre", activation="gelu", pooling="mean")
    tokens = oracle.vit_tokens(images, params, c, mean_conv)
    expected = oracle.linear(tokens[:, 1:].mean(axis=1), params, "head.")
    np.testing.assert_allclose(oracle.vit(images, params, c, conventions=mean_conv), expected)
    assert tokens.shape == (2, 5, 8)


@spec("8.1", "8.2", "8.3", "7.2", "7.3")
@given(seed=seeds, tie=st.booleans(), scale=st.sampled_from(["emb", "prj", "none"]))
def test_seq2seq_logits_causality_and_tying(seed, tie, scale):
    c = Config(
        d_model=8,
        n_heads=2,
        d_ff=16,
        n_layers=1,
        n_decoder_layers=1,
        vocab_size=11,
        tie_weights=tie,
    )
    conv = Conventions(embedding_scale=scale)
    params = init_params("seq2seq", c, conv, seed=seed % 1000)
    r = rng(seed)
    src, tgt = r.integers(1, 11, (2, 5)), r.integers(1, 11, (2, 4))
    logits = oracle.seq2seq(src, tgt, params, c, conventions=conv)
    assert logits.shape == (2, 4, 11)
    assert not np.allclose(np.exp(logits).sum(axis=-1), 1.0)  # logits, not probabilities
    # Causal: changing the last target token leaves earlier positions unchanged.
    tgt2 = tgt.copy()
    tgt2[:, -1] = (tgt2[:, -1] % 10) + 1
    logits2 = oracle.seq2seq(src, tgt2, params, c, conventions=conv)
    np.testing.assert_allclose(logits2[:, :-1], logits[:, :-1], rtol=1e-12, atol=1e-12)
    # Source padding: what sits behind a pad does not matter... only its embedding row does;
    # replacing a padded source token by another pad changes nothing.
    src_padded = src.copy()
    src_padded[:, -2:] = 0
    a = oracle.seq2seq(src_padded, tgt, params, c, conventions=conv)
    src_padded[:, -1] = 0
    np.testing.assert_allclose(oracle.seq2seq(src_padded, tgt, params, c, conventions=conv), a)


@spec("7.3")
def test_pre_ln_stack_ends_with_a_norm_and_post_ln_does_not():
    pre = Conventions(norm_placement="pre")
    c = Config(d_model=8, n_heads=2, d_ff=16, n_layers=0)
    x = rng(0).standard_normal((1, 3, 8)) * 5 + 2
    np.testing.assert_array_equal(oracle.encoder(x, {}, c, conventions=CANONICAL), x)
    params = init_params("encoder", c, pre, seed=0)
    expected = oracle.layer_norm(x, params["norm.weight"], params["norm.bias"])
    np.testing.assert_allclose(oracle.encoder(x, params, c, conventions=pre), expected)
