"""float64 autograd gradients of the PyTorch reference model are right (torch.autograd.gradcheck),
and masking and padding stop gradients exactly where the spec says they must."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck

from tck.reference import Config, Conventions, init_params, model

spec = pytest.mark.spec

# d_k != d_v, and H * d_v != D, so that head split/merge is exercised in the gradients too
CONFIG = Config(
    d_model=8, n_heads=2, d_k=3, d_v=2, d_ff=6, n_layers=1, n_decoder_layers=1, vocab_size=7,
    image_size=4, patch_size=2, channels=2, n_classes=3,
)  # fmt: skip


def loaded(component: str, conventions: Conventions | None = None, config: Config = CONFIG):
    module = model.build(component, config, conventions)
    model.load_canonical(module, init_params(component, config, conventions, seed=1))
    return module.eval()


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    x = np.random.default_rng(seed).standard_normal(shape)
    return torch.tensor(x, dtype=torch.float64, requires_grad=True)


PADDING = model.key_padding(torch.tensor([[True, True, True, False], [True, False, False, False]]))


@spec("3.4", "3.5", "4.2")
def test_mha_gradients_wrt_query_key_value():
    mha = loaded("mha")
    query, key, value = randn(2, 3, 8, seed=0), randn(2, 4, 8, seed=1), randn(2, 4, 8, seed=2)
    assert gradcheck(lambda q, k, v: mha(q, k, v, PADDING), (query, key, value))


@spec("3.1", "4.4")
@pytest.mark.parametrize("policy", ["zero", "uniform"])
def test_attention_gradients_are_finite_through_fully_masked_rows(policy):
    q, k, v = randn(1, 2, 3, 4, seed=0), randn(1, 2, 5, 4, seed=1), randn(1, 2, 5, 3, seed=2)
    keep = torch.rand(1, 1, 3, 5, generator=torch.Generator().manual_seed(0)) < 0.6
    keep[..., 1, :] = False  # query 1 has no key: the softmax alone would give NaN
    assert gradcheck(
        lambda q, k, v: model.scaled_dot_product_attention(q, k, v, keep, None, policy), (q, k, v)
    )


@spec("5.1", "5.2")
@pytest.mark.parametrize("eps_placement", ["inside_sqrt", "outside_sqrt"])
@pytest.mark.parametrize("variance", ["biased", "unbiased"])
def test_layer_norm_gradients(eps_placement, variance):
    norm = loaded("layer_norm", Conventions(eps_placement=eps_placement, variance=variance))
    assert gradcheck(norm, (randn(2, 3, 8),))


@spec("5.3")
def test_rms_norm_gradients():
    assert gradcheck(loaded("rms_norm"), (randn(2, 3, 8),))


@spec("5.4")
def test_scale_norm_gradients():
    # rows of norm about 3: the clamp (at 1e-5) is not reached, the map is smooth there
    assert gradcheck(loaded("scale_norm"), (randn(2, 3, 8),))


@spec("6.1")
@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh"])
def test_ffn_gradients(activation):
    # random inputs keep ReLU's pre-activations away from its kink at 0
    assert gradcheck(loaded("ffn", Conventions(activation=activation)), (randn(2, 3, 8),))


@spec("7.1")
@pytest.mark.parametrize("placement", ["post", "pre"])
def test_encoder_layer_gradients(placement):
    layer = loaded("encoder_layer", Conventions(norm_placement=placement))
    assert gradcheck(lambda x: layer(x, PADDING), (randn(2, 4, 8),))


@spec("7.2", "3.5", "4.3")
@pytest.mark.parametrize("placement", ["post", "pre"])
def test_decoder_layer_gradients(placement):
    layer = loaded("decoder_layer", Conventions(norm_placement=placement))
    causal = model.causal_keep_mask(3, 3)
    assert gradcheck(
        lambda x, memory: layer(x, memory, causal, PADDING), (randn(2, 3, 8), randn(2, 4, 8))
    )


@spec("9.1", "9.4", "9.5")
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_vit_gradients_wrt_the_image(pooling):
    vit = loaded("vit", Conventions(norm_placement="pre", activation="gelu", pooling=pooling))
    assert gradcheck(vit, (randn(2, 2, 4, 4),))


@spec("4.2", "4.4")
@pytest.mark.parametrize("policy", ["zero", "nan", "uniform", "undefined"])
def test_values_at_masked_keys_get_exactly_zero_gradient(policy):
    q, k, v = randn(2, 2, 3, 4, seed=0), randn(2, 2, 4, 4, seed=1), randn(2, 2, 4, 3, seed=2)
    out = model.scaled_dot_product_attention(q, k, v, PADDING, fully_masked_rows=policy)
    (out * torch.randn(out.shape, dtype=torch.float64)).sum().backward()
    masked = ~PADDING[:, 0, 0, :]  # (B, Lk)
    assert (v.grad[masked[:, None, :, None].expand_as(v.grad)] == 0).all()
    assert (v.grad[~masked[:, None, :, None].expand_as(v.grad)] != 0).all()
    # and through the projections of MHA: value rows at padded positions get no gradient
    mha = loaded("mha", Conventions(fully_masked_rows=policy))
    query, value = randn(2, 3, 8, seed=3), randn(2, 4, 8, seed=4)
    mha(query, randn(2, 4, 8, seed=5), value, PADDING).sum().backward()
    assert (value.grad[masked] == 0).all() and (value.grad[~masked] != 0).all()


@spec("1.3")
def test_padding_row_of_the_embedding_gets_no_gradient():
    embedding = loaded("embedding")
    pad = CONFIG.padding_idx
    with torch.no_grad():
        embedding.weight[pad] = 1.0  # even when it is not zero
    ids = torch.tensor([[pad, 1, 2, pad], [3, pad, 1, 4]])
    (embedding(ids) * torch.randn(2, 4, 8, dtype=torch.float64)).sum().backward()
    grad = embedding.weight.grad
    assert (grad[pad] == 0).all()
    assert grad[[1, 2, 3, 4]].abs().sum(dim=-1).gt(0).all()
