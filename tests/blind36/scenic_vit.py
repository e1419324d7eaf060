# fmt: off
# ruff: noqa
"""Scenic's baseline ViT (scenic/projects/baselines/vit.py, with flax.linen's
MultiHeadDotProductAttention, DenseGeneral, LayerNorm and Conv, and scenic's
attention_layers.MlpBlock and nn_layers.StochasticDepth) ported to torch the way checkpoint
ports of Flax code are written: the Flax module names kept (`embedding`, `cls`,
`Transformer`/`posembed_input`, `encoderblock_{i}`, `LayerNorm_0`,
`MultiHeadDotProductAttention_0`, `MlpBlock_0`, `encoder_norm`, `output_projection`), the
Flax kernel layouts kept (Dense kernels [in, out], DenseGeneral kernels [D, H, d] and
[H, d, D], the Conv kernel HWIO), images NHWC inside, `deterministic` threaded through every
call; written for the thirty-sixth blind benchmark (tests/blind36)."""

import functools
import math
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn


# ---- flax.linen, the pieces the model uses


def gelu(x, approximate: bool = True):
    # jax.nn.gelu: the tanh approximation unless approximate=False
    if approximate:
        cdf = 0.5 * (1.0 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * (x ** 3))))
        return x * cdf
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


class LayerNorm(nn.Module):
    """flax.linen.LayerNorm: epsilon 1e-6, `scale` and `bias`, statistics over the last axis
    (use_fast_variance=False)."""

    def __init__(self, features: int, epsilon: float = 1e-6, use_bias: bool = True, use_scale: bool = True):
        super().__init__()
        self.epsilon = epsilon
        self.scale = nn.Parameter(torch.ones(features)) if use_scale else None
        self.bias = nn.Parameter(torch.zeros(features)) if use_bias else None

    def _compute_stats(self, x):
        # flax's _compute_stats: statistics in at least float32, use_fast_variance=False
        x = x.to(torch.promote_types(x.dtype, torch.float32))
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return mean, var

    def forward(self, x):
        mean, var = self._compute_stats(x)
        y = x.to(mean.dtype) - mean
        mul = torch.rsqrt(var + self.epsilon)
        if self.scale is not None:
            mul = mul * self.scale
        y = y * mul
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype)


class Dense(nn.Module):
    """flax.linen.Dense: y = x @ kernel + bias, kernel [in, out]."""

    def __init__(self, in_features: int, features: int, use_bias: bool = True):
        super().__init__()
        self.kernel = nn.Parameter(torch.empty(in_features, features))
        nn.init.xavier_uniform_(self.kernel)
        self.bias = nn.Parameter(torch.zeros(features)) if use_bias else None

    def forward(self, inputs):
        y = torch.tensordot(inputs, self.kernel, dims=([inputs.ndim - 1], [0]))
        if self.bias is not None:
            y = y + self.bias
        return y


class DenseGeneral(nn.Module):
    """flax.linen.DenseGeneral for the two uses attention makes of it: features (H, d) from the
    last axis (kernel [D, H, d], bias [H, d]), or features D from the axes (-2, -1)
    (kernel [H, d, D], bias [D])."""

    def __init__(self, in_features, features, axis=-1, use_bias: bool = True):
        super().__init__()
        in_features = tuple(in_features) if isinstance(in_features, (tuple, list)) else (in_features,)
        features = tuple(features) if isinstance(features, (tuple, list)) else (features,)
        self.axis = axis
        self.n_in = len(in_features)
        self.kernel = nn.Parameter(torch.empty(*in_features, *features))
        fan_in = math.prod(in_features)
        nn.init.normal_(self.kernel, std=1.0 / math.sqrt(fan_in))
        self.bias = nn.Parameter(torch.zeros(*features)) if use_bias else None

    def forward(self, inputs):
        contract = list(range(inputs.ndim - self.n_in, inputs.ndim))
        out = torch.tensordot(inputs, self.kernel, dims=(contract, list(range(self.n_in))))
        if self.bias is not None:
            out = out + self.bias
        return out


def dot_product_attention_weights(query, key, bias=None, mask=None, dropout_rate=0.0,
                                  deterministic=False, dtype=None):
    dtype = query.dtype if dtype is None else dtype
    depth = query.shape[-1]
    query = query / math.sqrt(depth)
    # attn weight shape is (batch..., num_heads, q_length, kv_length)
    attn_weights = torch.einsum("...qhd,...khd->...hqk", query, key)

    # apply attention bias: masking, dropout, proximity bias, etc.
    if bias is not None:
        attn_weights = attn_weights + bias
    # apply attention mask
    if mask is not None:
        big_neg = torch.finfo(dtype).min
        attn_weights = torch.where(mask, attn_weights, big_neg)

    # normalize the attention weights
    attn_weights = torch.softmax(attn_weights, dim=-1).to(dtype)

    # apply attention dropout
    if not deterministic and dropout_rate > 0.0:
        attn_weights = F.dropout(attn_weights, p=dropout_rate, training=True)

    return attn_weights


def dot_product_attention(query, key, value, bias=None, mask=None, dropout_rate=0.0,
                          deterministic=False, dtype=None):
    assert key.ndim == query.ndim == value.ndim, "q, k, v must have same rank."
    assert query.shape[-2] == key.shape[-2] == value.shape[-2], "q, k, v num_heads must match."
    assert key.shape[-3] == value.shape[-3], "k, v lengths must match."

    # compute attention weights
    attn_weights = dot_product_attention_weights(
        query, key, bias, mask, dropout_rate, deterministic, dtype)

    # return weighted sum over values for each query position
    return torch.einsum("...hqk,...khd->...qhd", attn_weights, value)


class MultiHeadDotProductAttention(nn.Module):
    def __init__(self, in_features: int, num_heads: int, dropout_rate: float = 0.0,
                 broadcast_dropout: bool = False, use_bias: bool = True):
        super().__init__()
        qkv_features = in_features
        assert qkv_features % num_heads == 0, "Memory dimension must be divisible by number of heads."
        head_dim = qkv_features // num_heads
        self.num_heads = num_heads
        self.dropout_rate = dropout_rate
        dense = functools.partial(DenseGeneral, in_features, (num_heads, head_dim), use_bias=use_bias)
        self.query, self.key, self.value = dense(), dense(), dense()
        self.out = DenseGeneral((num_heads, head_dim), in_features, axis=(-2, -1), use_bias=use_bias)

    def forward(self, inputs_q, inputs_kv, mask=None, deterministic=True):
        # project inputs_q to multi-headed q/k/v
        # dimensions are then [batch..., length, n_heads, n_features_per_head]
        query, key, value = (self.query(inputs_q), self.key(inputs_kv), self.value(inputs_kv))

        # apply attention
        x = dot_product_attention(
            query, key, value, mask=mask, dropout_rate=self.dropout_rate,
            deterministic=deterministic)
        # back to the original inputs dimensions
        out = self.out(x)
        return out


class Conv(nn.Module):
    """flax.linen.Conv, padding 'VALID': inputs NHWC, kernel HWIO [kh, kw, in, out]."""

    def __init__(self, in_features: int, features: int, kernel_size, strides, use_bias: bool = True):
        super().__init__()
        self.strides = tuple(strides)
        self.kernel = nn.Parameter(torch.empty(*kernel_size, in_features, features))
        nn.init.normal_(self.kernel, std=1.0 / math.sqrt(in_features * math.prod(kernel_size)))
        self.bias = nn.Parameter(torch.zeros(features)) if use_bias else None

    def forward(self, inputs):
        # NHWC / HWIO -> torch's NCHW / OIHW and back
        y = F.conv2d(inputs.permute(0, 3, 1, 2), self.kernel.permute(3, 2, 0, 1), self.bias,
                     stride=self.strides)
        return y.permute(0, 2, 3, 1)


# ---- scenic.model_lib.layers


class StochasticDepth(nn.Module):
    """Performs layer-dropout (also known as stochastic depth)."""

    def __init__(self, rate: float = 0.0):
        super().__init__()
        self.rate = rate

    def forward(self, x, deterministic: bool = False):
        if deterministic or not self.rate:
            return x
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        keep = torch.bernoulli(torch.full(shape, 1.0 - self.rate, dtype=x.dtype, device=x.device))
        return x * keep / (1.0 - self.rate)


class MlpBlock(nn.Module):
    """Transformer MLP / feed-forward block."""

    def __init__(self, in_features: int, mlp_dim: int, out_dim: Optional[int] = None,
                 dropout_rate: float = 0.1, activation_fn=gelu):
        super().__init__()
        actual_out_dim = in_features if out_dim is None else out_dim
        self.dropout_rate = dropout_rate
        self.activation_fn = activation_fn
        self.Dense_0 = Dense(in_features, mlp_dim)
        self.Dense_1 = Dense(mlp_dim, actual_out_dim)
        nn.init.normal_(self.Dense_0.bias, std=1e-6)
        nn.init.normal_(self.Dense_1.bias, std=1e-6)

    def forward(self, inputs, *, deterministic: bool):
        x = self.Dense_0(inputs)
        x = self.activation_fn(x)
        x = F.dropout(x, p=self.dropout_rate, training=not deterministic)
        output = self.Dense_1(x)
        output = F.dropout(output, p=self.dropout_rate, training=not deterministic)
        return output


# ---- scenic/projects/baselines/vit.py


class AddPositionEmbs(nn.Module):
    """Adds learned positional embeddings to the inputs."""

    def __init__(self, num_tokens: int, features: int):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, num_tokens, features))
        nn.init.normal_(self.pos_embedding, std=0.02)

    def forward(self, inputs):
        # inputs.shape is (batch_size, seq_len, emb_dim).
        assert inputs.ndim == 3, ("Number of dimensions should be 3, but it is: %d" % inputs.ndim)
        pos_emb_shape = (1, inputs.shape[1], inputs.shape[2])
        pe = self.pos_embedding
        assert tuple(pe.shape) == pos_emb_shape
        return inputs + pe


class Encoder1DBlock(nn.Module):
    """Transformer encoder layer."""

    def __init__(self, hidden_size: int, mlp_dim: int, num_heads: int, dropout_rate: float = 0.1,
                 attention_dropout_rate: float = 0.1, stochastic_depth: float = 0.0):
        super().__init__()
        self.dropout_rate = dropout_rate
        self.LayerNorm_0 = LayerNorm(hidden_size)
        self.MultiHeadDotProductAttention_0 = MultiHeadDotProductAttention(
            hidden_size, num_heads=num_heads, broadcast_dropout=False,
            dropout_rate=attention_dropout_rate)
        self.StochasticDepth_0 = StochasticDepth(rate=stochastic_depth)
        self.LayerNorm_1 = LayerNorm(hidden_size)
        self.MlpBlock_0 = MlpBlock(hidden_size, mlp_dim=mlp_dim, dropout_rate=dropout_rate,
                                   activation_fn=gelu)
        self.StochasticDepth_1 = StochasticDepth(rate=stochastic_depth)

    def forward(self, inputs, deterministic: bool):
        # Attention block.
        assert inputs.ndim == 3
        x = self.LayerNorm_0(inputs)
        x = self.MultiHeadDotProductAttention_0(x, x, deterministic=deterministic)
        x = F.dropout(x, self.dropout_rate, training=not deterministic)
        x = self.StochasticDepth_0(x, deterministic)
        x = x + inputs

        # MLP block.
        y = self.LayerNorm_1(x)
        y = self.MlpBlock_0(y, deterministic=deterministic)
        y = self.StochasticDepth_1(y, deterministic)
        return y + x


class Encoder(nn.Module):
    """Transformer Encoder."""

    def __init__(self, num_tokens: int, hidden_size: int, num_layers: int, mlp_dim: int,
                 num_heads: int, dropout_rate: float = 0.1, attention_dropout_rate: float = 0.1,
                 stochastic_depth: float = 0.0):
        super().__init__()
        self.num_layers = num_layers
        self.dropout_rate = dropout_rate
        self.posembed_input = AddPositionEmbs(num_tokens, hidden_size)
        for lyr in range(num_layers):
            self.add_module(f"encoderblock_{lyr}", Encoder1DBlock(
                hidden_size, mlp_dim=mlp_dim, num_heads=num_heads, dropout_rate=dropout_rate,
                attention_dropout_rate=attention_dropout_rate,
                stochastic_depth=(lyr / max(num_layers - 1, 1)) * stochastic_depth))
        self.encoder_norm = LayerNorm(hidden_size)

    def forward(self, inputs, *, train: bool = False):
        assert inputs.ndim == 3  # (batch, len, emb)
        x = self.posembed_input(inputs)
        x = F.dropout(x, p=self.dropout_rate, training=train)

        # Input Encoder.
        for lyr in range(self.num_layers):
            x = getattr(self, f"encoderblock_{lyr}")(x, deterministic=not train)
        encoded = self.encoder_norm(x)
        return encoded


class ViT(nn.Module):
    """Vision Transformer model."""

    def __init__(self, num_classes: int, mlp_dim: int, num_layers: int, num_heads: int,
                 patches: Any, hidden_size: int, image_size: int, channels: int = 3,
                 representation_size: Optional[int] = None, dropout_rate: float = 0.1,
                 attention_dropout_rate: float = 0.1, stochastic_depth: float = 0.0,
                 classifier: str = "gap"):
        super().__init__()
        fh, fw = patches["size"]
        self.patches = patches
        self.image_size = image_size
        self.classifier = classifier
        self.representation_size = representation_size
        self.embedding = Conv(channels, hidden_size, (fh, fw), strides=(fh, fw))
        num_tokens = (image_size // fh) * (image_size // fw)
        if self.classifier == "token":
            self.cls = nn.Parameter(torch.zeros(1, 1, hidden_size))
            num_tokens += 1
        self.Transformer = Encoder(
            num_tokens, hidden_size, num_layers=num_layers, mlp_dim=mlp_dim, num_heads=num_heads,
            dropout_rate=dropout_rate, attention_dropout_rate=attention_dropout_rate,
            stochastic_depth=stochastic_depth)
        if self.representation_size is not None:
            self.pre_logits = Dense(hidden_size, self.representation_size)
            head_in = self.representation_size
        else:
            head_in = hidden_size
        self.output_projection = Dense(head_in, num_classes)
        nn.init.zeros_(self.output_projection.kernel)

    def forward(self, x, *, train: bool = False, debug: bool = False):
        # x: [n, h, w, c] (NHWC, as the Flax input pipeline feeds it)
        fh, fw = self.patches["size"]
        # Extracting patches and then embedding is in fact a single convolution.
        x = self.embedding(x)
        n, h, w, c = x.shape
        x = torch.reshape(x, [n, h * w, c])

        # If we want to add a class token, add it here.
        if self.classifier == "token":
            cls = self.cls
            cls = torch.tile(cls, [n, 1, 1])
            x = torch.cat([cls, x], dim=1)

        x = self.Transformer(x, train=train)

        if self.classifier in ("token", "0"):
            x = x[:, 0]
        elif self.classifier in ("gap", "gmp", "gsp"):
            fn = {"gap": torch.mean, "gmp": torch.amax, "gsp": torch.sum}[self.classifier]
            x = fn(x, dim=1)

        if self.representation_size is not None:
            x = self.pre_logits(x)
            x = torch.tanh(x)
        x = self.output_projection(x)
        return x


# ---- the adapter (glue written for the kit; not part of Scenic)
from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def _vit(config):
    return ViT(num_classes=config.n_classes, mlp_dim=config.d_ff, num_layers=config.n_layers,
               num_heads=config.n_heads, patches={"size": (config.patch_size, config.patch_size)},
               hidden_size=config.d_model, image_size=config.image_size, channels=config.channels,
               representation_size=None, dropout_rate=0.1, attention_dropout_rate=0.1,
               stochastic_depth=0.1, classifier="token")


def _vit_forward(model, images):
    # the kit's images are NCHW; the Flax model takes NHWC
    if images.ndim != 4 or images.shape[2] != model.image_size or images.shape[3] != model.image_size:
        raise ValueError(f"expected images [B, C, {model.image_size}, {model.image_size}], got {tuple(images.shape)}")
    return model(images.permute(0, 2, 3, 1), train=False)


def _patch_forward(conv, images):
    if images.ndim != 4:
        raise ValueError(f"expected a 4-D image batch, got {tuple(images.shape)}")
    p = conv.strides[0]
    if images.shape[2] % p or images.shape[3] % p:
        raise ValueError(f"image size {tuple(images.shape[2:])} is not a multiple of the patch size {p}")
    x = conv(images.permute(0, 2, 3, 1))
    n, h, w, c = x.shape
    return torch.reshape(x, [n, h * w, c])


def _layer_map(src, dst, config):
    D, H = config.d_model, config.n_heads
    attn = f"{dst}MultiHeadDotProductAttention_0"
    m = {}
    for c, name in zip("qkv", ("query", "key", "value")):
        m[f"{src}self_attn.{c}.weight"] = Param(f"{attn}.{name}.kernel", permute=(1, 2, 0))
        m[f"{src}self_attn.{c}.bias"] = Param(f"{attn}.{name}.bias")
    m[f"{src}self_attn.o.weight"] = Param(f"{attn}.out.kernel", permute=(2, 0, 1))
    m[f"{src}self_attn.o.bias"] = f"{attn}.out.bias"
    m[f"{src}norm1.weight"] = f"{dst}LayerNorm_0.scale"
    m[f"{src}norm1.bias"] = f"{dst}LayerNorm_0.bias"
    m[f"{src}norm2.weight"] = f"{dst}LayerNorm_1.scale"
    m[f"{src}norm2.bias"] = f"{dst}LayerNorm_1.bias"
    m[f"{src}ffn.fc1.weight"] = Param(f"{dst}MlpBlock_0.Dense_0.kernel", permute=(1, 0))
    m[f"{src}ffn.fc1.bias"] = f"{dst}MlpBlock_0.Dense_0.bias"
    m[f"{src}ffn.fc2.weight"] = Param(f"{dst}MlpBlock_0.Dense_1.kernel", permute=(1, 0))
    m[f"{src}ffn.fc2.bias"] = f"{dst}MlpBlock_0.Dense_1.bias"
    return m


def _vit_map(config):
    m = {"patch_embed.weight": Param("embedding.kernel", permute=(3, 2, 0, 1)),
         "patch_embed.bias": "embedding.bias",
         "cls_token": "cls",
         "pos_embed": "Transformer.posembed_input.pos_embedding",
         "encoder.norm.weight": "Transformer.encoder_norm.scale",
         "encoder.norm.bias": "Transformer.encoder_norm.bias",
         "head.weight": Param("output_projection.kernel", permute=(1, 0)),
         "head.bias": "output_projection.bias"}
    for i in range(config.n_layers):
        m |= _layer_map(f"encoder.layers.{i}.", f"Transformer.encoderblock_{i}.", config)
    return m


CONV = Conventions(norm_placement="pre", activation="gelu_tanh", eps=1e-6)

adapter = TorchModuleAdapter("scenic-vit", [
    TorchEntry(
        "patch_embed",
        make=lambda config: Conv(config.channels, config.d_model, (config.patch_size, config.patch_size),
                                 strides=(config.patch_size, config.patch_size)),
        forward=_patch_forward,
        param_map={"weight": Param("kernel", permute=(3, 2, 0, 1)), "bias": "bias"},
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: Encoder1DBlock(config.d_model, config.d_ff, config.n_heads,
                                           dropout_rate=0.1, attention_dropout_rate=0.1,
                                           stochastic_depth=0.1),
        forward=lambda layer, x: layer(x, deterministic=True),
        param_map=lambda config: _layer_map("", "", config),
        conventions=CONV,
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "vit",
        make=_vit,
        forward=_vit_forward,
        param_map=_vit_map,
        conventions=CONV,
        supports=ConfigSpace(split_heads=True),
    ),
])
