"""Values worked by hand and written here, not computed by the oracle.

Each expectation is arithmetic a reader can redo on paper; where a transcendental value
appears, it is written to 16 digits (checked against a table, not produced by the oracle).
"""

import math

import numpy as np
import pytest

from tck.reference import Config, Conventions, init_params, oracle, param_count
from tck.reference.costs import attention_flops, flops

spec = pytest.mark.spec

SIN_1, COS_1 = 0.8414709848078965, 0.5403023058681398
SIN_001, COS_001 = 0.009999833334166664, 0.9999500004166653


@spec("2.1")
def test_sinusoidal_pe_positions_0_and_1_for_d4():
    # d = 4: w_0 = 1, w_1 = 10000^(-2/4) = 0.01.
    pe = oracle.sinusoidal_pe(2, 4)
    expected = [[0.0, 1.0, 0.0, 1.0], [SIN_1, COS_1, SIN_001, COS_001]]
    np.testing.assert_allclose(pe, expected, rtol=0, atol=1e-15)


@spec("2.1")
def test_sinusoidal_pe_concatenated_layout_for_d4():
    pe = oracle.sinusoidal_pe(2, 4, layout="concatenated")
    expected = [[0.0, 0.0, 1.0, 1.0], [SIN_1, SIN_001, COS_1, COS_001]]
    np.testing.assert_allclose(pe, expected, rtol=0, atol=1e-15)


@spec("2.1", "2.2")
def test_sinusoidal_pe_at_a_long_position():
    # pos = 10000, d = 2: only w_0 = 1, so PE = [sin(10000), cos(10000)].
    pe = oracle.sinusoidal_pe(10001, 2)[10000]
    np.testing.assert_allclose(pe, [-0.3056143888882521, -0.9521553682590148], atol=1e-12)


@spec("2.3", "2.4")
def test_rope_of_a_known_vector():
    # d = 4 at position 1: pair 0 turns by 1 rad, pair 1 by 0.01 rad.
    x = np.array([[0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 2.0]])  # positions 0, 1
    out = oracle.rope(x)
    expected_pos1 = [COS_1, SIN_1, -2 * SIN_001, 2 * COS_001]
    np.testing.assert_allclose(out[1], expected_pos1, atol=1e-15)
    # half_split pairs (x0, x2) and (x1, x3): x = [1, 0, 0, 2] -> pair0 (1, 0), pair1 (0, 2).
    out = oracle.rope(x, layout="half_split")
    np.testing.assert_allclose(out[1], [COS_1, -2 * SIN_001, SIN_1, 2 * COS_001], atol=1e-15)


@spec("5.1")
def test_layer_norm_of_1_2_3_4():
    # mean 2.5; deviations -1.5 -0.5 0.5 1.5; biased variance (2.25+0.25+0.25+2.25)/4 = 1.25
    y = oracle.layer_norm([1.0, 2.0, 3.0, 4.0], eps=1e-5)
    expected = np.array([-1.5, -0.5, 0.5, 1.5]) / math.sqrt(1.25 + 1e-5)
    np.testing.assert_allclose(y, expected, rtol=1e-15)
    y = oracle.layer_norm([1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 2.0, 2.0], [1.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(y, 2 * expected + [1.0, 0.0, 0.0, 0.0], rtol=1e-15)


@spec("5.2")
def test_layer_norm_variants_by_hand():
    x = [1.0, 2.0, 3.0, 4.0]
    centred = np.array([-1.5, -0.5, 0.5, 1.5])
    y = oracle.layer_norm(x, eps=1e-5, eps_placement="outside_sqrt")
    np.testing.assert_allclose(y, centred / (math.sqrt(1.25) + 1e-5), rtol=1e-15)
    # unbiased: 5 / (4 - 1)
    y = oracle.layer_norm(x, eps=1e-5, variance="unbiased")
    np.testing.assert_allclose(y, centred / math.sqrt(5 / 3 + 1e-5), rtol=1e-15)


@spec("5.1", "5.2")
def test_layer_norm_low_variance_row_where_eps_matters():
    # x = [1, 1.001]: deviations -/+5e-4, variance 2.5e-7, so eps = 1e-5 dominates.
    y = oracle.layer_norm([1.0, 1.001], eps=1e-5)
    np.testing.assert_allclose(
        y, [-5e-4 / math.sqrt(1.025e-5), 5e-4 / math.sqrt(1.025e-5)], rtol=1e-9
    )
    assert abs(y[1]) < 0.16  # far from the +-1 that an eps-free norm would give
    y = oracle.layer_norm([1.0, 1.001], eps=1e-5, eps_placement="outside_sqrt")
    np.testing.assert_allclose(y, [-5e-4 / (5e-4 + 1e-5), 5e-4 / (5e-4 + 1e-5)], rtol=1e-9)


@spec("5.3")
def test_rms_norm_by_hand():
    # mean(x^2) = (9 + 16) / 2 = 12.5
    y = oracle.rms_norm([3.0, 4.0], [1.0, 2.0], eps=0.0)
    np.testing.assert_allclose(y, [3 / math.sqrt(12.5), 8 / math.sqrt(12.5)], rtol=1e-15)


@spec("5.4")
def test_scale_norm_by_hand():
    # SPEC.md §5.4's example: g = 2, ||[3, 4, 0, 0]|| = 5; a zero row stays zero (the clamp)
    y = oracle.scale_norm([[3.0, 4.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], [2.0], eps=1e-5)
    np.testing.assert_allclose(y, [[1.2, 1.6, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], rtol=1e-15)
    # below eps the row is divided by eps: ||x|| = 2^-20 < 1e-5 -> g * 2^-20 / 1e-5
    y = oracle.scale_norm([2.0**-20, 0.0], [2.0], eps=1e-5)
    np.testing.assert_allclose(y, [2.0 * 2.0**-20 / 1e-5, 0.0], rtol=1e-15)
    # one scalar gain: every row's norm is |g| above eps, whatever its width
    rows = np.random.default_rng(0).standard_normal((3, 7)) * [[1e-3], [1.0], [1e3]]
    norms = np.linalg.norm(oracle.scale_norm(rows, [-1.5], eps=1e-5), axis=-1)
    np.testing.assert_allclose(norms, 1.5, rtol=1e-14)


@spec("3.1")
def test_attention_2x2_by_hand():
    # q = k = I, d_k = 2: scores = I / sqrt(2); row 0 weights [e, 1] / (e + 1), e = exp(1/sqrt 2)
    q = k = np.eye(2)
    v = np.array([[1.0, 2.0], [3.0, 4.0]])
    e = math.exp(1 / math.sqrt(2))
    expected = np.array([[e + 3, 2 * e + 4], [1 + 3 * e, 2 + 4 * e]]) / (e + 1)
    np.testing.assert_allclose(oracle.scaled_dot_product_attention(q, k, v), expected, rtol=1e-15)


@spec("3.1", "4.1")
def test_attention_3x3_with_a_mask_by_hand():
    # Zero scores: weights are uniform over the kept keys.
    q = k = np.zeros((3, 2))
    v = np.array([[3.0], [6.0], [9.0]])
    keep = np.array([[True, False, False], [True, True, False], [True, True, True]])
    out = oracle.scaled_dot_product_attention(q, k, v, keep)
    np.testing.assert_allclose(out, [[3.0], [4.5], [6.0]], rtol=1e-15)


@spec("4.2")
def test_seed_keep_mask_for_padded_sentence():
    # "[I, love, NLP, PAD, PAD]" with PAD = 0
    ids = np.array([[5, 6, 7, 0, 0]])
    expected = [[True, True, True, False, False]]
    np.testing.assert_array_equal(oracle.pad_keep_mask_from_ids(ids, 0), expected)
    np.testing.assert_array_equal(oracle.padding_keep_mask([3], 5), expected)
    assert oracle.key_padding(oracle.padding_keep_mask([3], 5)).shape == (1, 1, 1, 5)


@spec("4.3")
def test_seed_subsequent_mask_for_4_tokens():
    expected = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(oracle.causal_keep_mask(4, 4), expected)
    np.testing.assert_array_equal(oracle.causal_keep_mask(4, 4, "bottom_right"), expected)


@spec("4.3")
def test_causal_alignment_when_lq_differs_from_lk():
    top_left = [[1, 0, 0, 0], [1, 1, 0, 0]]
    bottom_right = [[1, 1, 1, 0], [1, 1, 1, 1]]
    np.testing.assert_array_equal(
        oracle.causal_keep_mask(2, 4, "top_left"), np.array(top_left, bool)
    )
    np.testing.assert_array_equal(
        oracle.causal_keep_mask(2, 4, "bottom_right"), np.array(bottom_right, bool)
    )


@spec("4.4")
def test_fully_masked_row_policies_by_hand():
    q = k = np.zeros((2, 1))
    v = np.array([[2.0], [4.0]])
    keep = np.array([[False, False], [True, False]])
    expected = {"zero": [[0.0], [2.0]], "uniform": [[3.0], [2.0]]}
    for policy, values in expected.items():
        out = oracle.scaled_dot_product_attention(q, k, v, keep, fully_masked_rows=policy)
        np.testing.assert_array_equal(out, values)
    for policy in ("nan", "undefined"):
        out = oracle.scaled_dot_product_attention(q, k, v, keep, fully_masked_rows=policy)
        assert np.isnan(out[0, 0]) and out[1, 0] == 2.0


@spec("4.4", "11.7")
def test_an_undefined_row_does_not_reach_the_keys_that_hide_it():
    """A value that is NaN because an earlier layer left its row undefined (a left pad's
    query) is a placeholder: under 'undefined' a query that hides that key is unchanged
    by it, so a left-padded stack's real tokens are compared, not lost to NaN. Under 'nan'
    the arithmetic is IEEE's, as an implementation's (0 * NaN spreads), and a key the row
    does weigh passes its NaN on under every policy."""
    q = k = np.zeros((3, 1))
    v = np.array([[np.nan], [2.0], [4.0]])
    keep = np.array([[False, False, False], [False, True, True], [True, True, False]])
    out = oracle.scaled_dot_product_attention(q, k, v, keep, fully_masked_rows="undefined")
    assert np.isnan(out[0, 0]) and out[1, 0] == 3.0 and np.isnan(out[2, 0])
    spread = oracle.scaled_dot_product_attention(q, k, v, keep, fully_masked_rows="nan")
    assert np.isnan(spread).all()


SEED_VOCAB = {
    "[PAD]": 0,
    "[UNK]": 1,
    "[BOS]": 2,
    "[EOS]": 3,
    "你": 10,
    "好": 11,
    "，": 12,
    "今天": 20,
    "天气": 21,
    "如何": 22,
    "？": 23,
}


@spec("1.1")
def test_seed_tokenizer_example_and_its_vocabulary_bug():
    # "你好，今天天气如何？" -> [你, 好, ，, 今天, 天气, 如何, ？], framed with BOS and EOS.
    tokens = ["你", "好", "，", "今天", "天气", "如何", "？"]
    ids = [SEED_VOCAB["[BOS]"], *(SEED_VOCAB[t] for t in tokens), SEED_VOCAB["[EOS]"]]
    assert ids == [2, 10, 11, 12, 20, 21, 22, 23, 3]
    # The seed declares vocab_size = 11 but uses ids up to 23: the lookup must refuse.
    with pytest.raises(ValueError, match="outside the vocabulary"):
        oracle.embedding(np.array([ids]), np.zeros((11, 4)))
    table = np.arange(24 * 2, dtype=float).reshape(24, 2)
    np.testing.assert_array_equal(
        oracle.embedding(np.array([[23, 2]]), table), [[[46, 47], [4, 5]]]
    )


@spec("1.2")
def test_embedding_scale_options():
    assert oracle.embedding_scale(16, Conventions(embedding_scale="emb")) == (4.0, 1.0)
    assert oracle.embedding_scale(16, Conventions(embedding_scale="prj")) == (1.0, 0.25)
    assert oracle.embedding_scale(16, Conventions(embedding_scale="none")) == (1.0, 1.0)


@spec("1.3")
def test_padding_row_starts_at_zero():
    p = init_params("embedding", Config(vocab_size=7, padding_idx=3), seed=0)
    np.testing.assert_array_equal(p["weight"][3], 0.0)
    assert np.all(np.abs(p["weight"][[0, 1, 2, 4, 5, 6]]).sum(axis=1) > 0)


@spec("6.1")
def test_activations_by_hand():
    x = np.array([-1.0, 0.0, 1.0])
    np.testing.assert_array_equal(oracle.relu(x), [0.0, 0.0, 1.0])
    # Phi(1) = 0.8413447460685429, Phi(-1) = 0.15865525393145707
    np.testing.assert_allclose(
        oracle.gelu(x), [-0.15865525393145707, 0.0, 0.8413447460685429], rtol=1e-15
    )
    # tanh form at 1: 0.5 * (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.8411919906082768
    np.testing.assert_allclose(oracle.gelu_tanh([1.0]), [0.8411919906082768], rtol=1e-14)


@spec("6.1")
def test_ffn_by_hand():
    # D = 1, F = 2: hidden = relu([2x + 0, -x + 1]); out = 1*h0 + 3*h1 + 0.5
    params = {
        "fc1.weight": np.array([[2.0], [-1.0]]),
        "fc1.bias": np.array([0.0, 1.0]),
        "fc2.weight": np.array([[1.0, 3.0]]),
        "fc2.bias": np.array([0.5]),
    }
    out = oracle.feed_forward(np.array([[[1.0], [-2.0]]]), params)
    # x = 1: h = [2, 0] -> 2.5; x = -2: h = [0, 3] -> 9.5
    np.testing.assert_allclose(out, [[[2.5], [9.5]]])


@spec("3.3")
def test_head_split_order_by_hand():
    x = np.arange(8.0).reshape(1, 1, 8)  # one token, H = 2, d = 4
    heads = oracle.split_heads(x, 2)
    np.testing.assert_array_equal(heads[0, 0, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(heads[0, 1, 0], [4, 5, 6, 7])
    np.testing.assert_array_equal(oracle.merge_heads(heads), x)


@spec("9.1")
def test_patch_embedding_flatten_order_by_hand():
    # 1 channel, 4x4 image, patch 2: patch (0, 1) covers rows 0-1, columns 2-3.
    image = np.arange(16.0).reshape(1, 1, 4, 4)
    weight = np.zeros((4, 1, 2, 2))
    for i in range(4):  # output feature i picks pixel i of the patch in (y, x) order
        weight[i, 0, i // 2, i % 2] = 1.0
    out = oracle.patch_embed(image, weight, np.zeros(4), patch_size=2)
    assert out.shape == (1, 4, 4)
    np.testing.assert_array_equal(out[0, 0], [0, 1, 4, 5])
    np.testing.assert_array_equal(out[0, 1], [2, 3, 6, 7])  # row-major over the grid
    np.testing.assert_array_equal(out[0, 2], [8, 9, 12, 13])


@spec("10.3")
def test_parameter_counts_by_hand():
    c = Config(d_model=32, n_heads=4, d_ff=64)
    assert param_count("mha", c) == 4 * 32 * 32 + 4 * 32
    assert param_count("ffn", c) == 32 * 64 + 64 + 64 * 32 + 32
    assert param_count("layer_norm", c) == 64
    assert param_count("encoder_layer", c) == 4224 + 4192 + 2 * 64
    assert param_count("decoder_layer", c) == 2 * 4224 + 4192 + 3 * 64
    c = Config(d_model=8, n_heads=2, d_k=3, d_v=5, bias=False)
    assert param_count("mha", c) == 8 * 6 + 8 * 6 + 8 * 10 + 10 * 8
    tied, untied = Config(vocab_size=40), Config(vocab_size=40, tie_weights=False)
    assert param_count("seq2seq", untied) - param_count("seq2seq", tied) == 2 * 40 * 32
    vit = Config(d_model=32, n_layers=1, image_size=16, patch_size=4, channels=3, n_classes=10)
    pre = Conventions(norm_placement="pre", activation="gelu")
    # patch 3*4*4*32 + 32, cls 32, pos 17*32, one layer, final norm 64, head 10*32 + 10
    assert param_count("vit", vit, pre) == 1536 + 32 + 32 + 544 + 8544 + 64 + 330


@spec("10.4")
def test_flops_by_hand():
    assert attention_flops(1, 8, 1024, 1024, 64) == 4 * 8 * 1024**2 * 64
    assert attention_flops(2, 1, 4, 4, 8, causal=True) == 4 * 2 * 16 * 8 / 2
    c = Config(d_model=16, n_heads=2, d_ff=32)
    # ffn: two linears 2*B*L*16*32 each
    assert flops("ffn", c, batch=1, seq_len=10) == 2 * (2 * 10 * 16 * 32)
    # mha: 4 projections 2*L*16*16 each + core 4*H*L^2*8
    assert flops("mha", c, batch=1, seq_len=10) == 4 * 2 * 10 * 16 * 16 + 4 * 2 * 100 * 8
    assert flops("ffn", c, batch=1, seq_len=10, backward=True) == 3.5 * 2 * (2 * 10 * 16 * 32)


@spec("10.4", "11.2", "11.4")
def test_decoder_only_flops_by_hand():
    # 4 query heads over 2 KV heads of width 4: q 2*L*16*16, k and v 2*L*16*8 each, out
    # 2*L*16*16, causal core half of 4*H*L^2*4
    c = Config(d_model=16, n_heads=4, n_kv_heads=2, d_ff=32)
    projections = 2 * 10 * 16 * 16 * 2 + 2 * 10 * 16 * 8 * 2
    attention = projections + 4 * 4 * 100 * 4 / 2
    assert flops("causal_self_attention", c, batch=1, seq_len=10) == attention
    gated = 3 * (2 * 10 * 16 * 32)  # gate, up and down
    assert flops("gated_ffn", c, batch=1, seq_len=10) == gated
    # the block's FFN follows its conventions: GPT-2's plain FFN (canonical) or Llama's gated
    plain = 2 * (2 * 10 * 16 * 32)
    assert flops("decoder_block", c, batch=1, seq_len=10) == attention + plain
    llama = Conventions(norm_placement="pre", ffn_kind="gated", positions="rope")
    assert flops("decoder_block", c, batch=1, seq_len=10, conventions=llama) == attention + gated


@spec("6.3")
def test_activation_is_the_ffn_activation_elementwise():
    x = np.array([[[-2.7, -1.0, 0.0, 1.0, 2.7]]])
    for name, fn in oracle.ACTIVATIONS.items():
        np.testing.assert_array_equal(oracle.activation(x, name=name), fn(x))
    np.testing.assert_array_equal(oracle.activation(x), [[[0.0, 0.0, 0.0, 1.0, 2.7]]])
    # the two GELUs differ by ~4.7e-4 near |x| = 2.7 (§6.1)
    gap = np.abs(oracle.activation(x, name="gelu") - oracle.activation(x, name="gelu_tanh"))
    assert 1e-4 < gap.max() < 1e-3
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        oracle.activation(x, name="swish")
