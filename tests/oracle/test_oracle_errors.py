"""§10.6: shape contracts are enforced with errors that say what to do."""

import numpy as np
import pytest

from tck.reference import Config, Conventions, check_params, init_params, oracle, param_shapes

pytestmark = pytest.mark.spec("10.6")


def test_heads_must_divide_d_model_unless_widths_are_given():
    with pytest.raises(ValueError, match="not divisible by n_heads"):
        Config(d_model=10, n_heads=4)
    assert Config(d_model=10, n_heads=4, d_k=3, d_v=5).head_dim_v == 5


def test_image_size_must_be_divisible_by_the_patch():
    with pytest.raises(ValueError, match="not divisible by patch_size"):
        Config(image_size=10, patch_size=4)
    with pytest.raises(ValueError, match="not divisible by the patch size"):
        oracle.patch_embed(
            np.zeros((1, 3, 10, 8)), np.zeros((4, 3, 4, 4)), np.zeros(4), patch_size=4
        )
    c = Config(d_model=8, n_heads=2, image_size=8, patch_size=4)
    with pytest.raises(ValueError, match=r"images must have shape \(B, 3, 8, 8\)"):
        oracle.vit(np.zeros((1, 3, 12, 12)), init_params("vit", c), c)


def test_sequence_longer_than_max_len_is_refused():
    c = Config(d_model=8, n_heads=2, max_len=4, n_layers=1, n_decoder_layers=1)
    params = init_params("seq2seq", c)
    with pytest.raises(ValueError, match="exceeds the declared max_len=4"):
        oracle.seq2seq(np.ones((1, 5), int), np.ones((1, 2), int), params, c)


def test_token_ids_out_of_range_are_refused():
    with pytest.raises(ValueError, match="outside the vocabulary"):
        oracle.embedding(np.array([[-1]]), np.zeros((5, 2)))
    with pytest.raises(ValueError, match="must be integers"):
        oracle.embedding(np.array([[1.0]]), np.zeros((5, 2)))


def test_masks_must_be_boolean_and_broadcast():
    q = np.zeros((2, 1, 3, 4))
    with pytest.raises(ValueError, match="boolean"):
        oracle.scaled_dot_product_attention(q, q, q, np.zeros((3, 3)))
    with pytest.raises(ValueError, match="does not broadcast"):
        oracle.scaled_dot_product_attention(q, q, q, np.ones((3, 2, 3, 3), bool))
    # A (B, Lk) key-padding mask would broadcast as (Lq, Lk) by accident when B == Lq.
    with pytest.raises(ValueError, match="key_padding"):
        oracle.scaled_dot_product_attention(q, q, q, np.ones((2, 1, 3), bool))


def test_odd_widths_for_positional_encodings_are_refused():
    with pytest.raises(ValueError, match="even width"):
        oracle.sinusoidal_pe(4, 5)
    with pytest.raises(ValueError, match="even width"):
        oracle.rope(np.zeros((3, 5)))


def test_params_that_do_not_match_the_layout_are_named():
    c = Config()
    params = init_params("ffn", c)
    params["fc3.weight"] = params.pop("fc2.weight")
    params["fc1.bias"] = np.zeros(3)
    with pytest.raises(ValueError) as err:
        check_params("ffn", params, c)
    message = str(err.value)
    assert "missing fc2.weight" in message and "unexpected fc3.weight" in message
    assert "fc1.bias has shape (3,)" in message


def test_unknown_component_and_convention_values_are_refused():
    with pytest.raises(ValueError, match="unknown component 'mlp'"):
        param_shapes("mlp", Config())
    with pytest.raises(ValueError, match="norm_placement='middle'"):
        Conventions(norm_placement="middle")
    with pytest.raises(ValueError, match="unknown activation"):
        oracle.feed_forward(np.zeros((1, 1, 32)), init_params("ffn", Config()), activation="swish")


def test_output_shapes():
    c = Config(d_model=8, n_heads=2, d_k=3, d_v=5, d_ff=16)
    r = np.random.default_rng(0)
    q, k, v = (
        r.standard_normal((2, 2, 4, 3)),
        r.standard_normal((2, 2, 7, 3)),
        r.standard_normal((2, 2, 7, 5)),
    )
    assert oracle.scaled_dot_product_attention(q, k, v).shape == (2, 2, 4, 5)
    x, mem = r.standard_normal((2, 4, 8)), r.standard_normal((2, 7, 8))
    assert oracle.multi_head_attention(x, mem, mem, init_params("mha", c), n_heads=2).shape == (
        2,
        4,
        8,
    )
    assert oracle.decoder_layer(x, mem, init_params("decoder_layer", c), n_heads=2).shape == (
        2,
        4,
        8,
    )
