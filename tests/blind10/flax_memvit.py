# fmt: off
# ruff: noqa
"""A ViT written the way a JAX/Flax codebase writes it, in torch: explicit nested parameter
dicts with Flax's names and layouts (``kernel`` [in, out], ``DenseGeneral`` query/key/value
kernels [D, H, hd] and out kernel [H, hd, D], a ``Conv`` kernel HWIO [p, p, C, D], LayerNorm
``scale``), pure functions ``fn(params, x)`` written for ONE example and ``torch.func.vmap``-ed
over the batch (per-example randomness, as JAX splits rngs), dropout switched by a
``deterministic`` flag, and the attention of Rabe & Staats' memory-efficient attention
("Self-attention does not need O(n^2) memory"): queries in chunks, keys in chunks, each key
chunk summarised by its exponentials' values, sum and max, the chunks combined by rescaling
to the global max.

Written for the tenth blind benchmark (tests/blind10/PROTOCOL.md)."""

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import vmap

QUERY_CHUNK_SIZE = 8
KEY_CHUNK_SIZE = 4


def _acc(dtype):
    return torch.promote_types(dtype, torch.float32)


# ---- pure functions on parameter dicts (one example) -------------------------------------

def dropout(x, rate, deterministic):
    if deterministic or rate == 0.0:
        return x
    return F.dropout(x, rate, training=True)


def layer_norm(p, x, epsilon=1e-6):
    dtype = x.dtype
    x = x.to(_acc(dtype))
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).square().mean(-1, keepdim=True)
    y = (x - mean) * torch.rsqrt(var + epsilon)
    return y.to(dtype) * p["scale"] + p["bias"]


def dense(p, x):
    return x @ p["kernel"] + p["bias"]


def dense_general_in(p, x):
    # [L, D] x [D, H, hd] -> [L, H, hd]
    return torch.einsum("ld,dhk->lhk", x, p["kernel"]) + p["bias"]


def dense_general_out(p, x):
    # [L, H, hd] x [H, hd, D] -> [L, D]
    return torch.einsum("lhk,hkd->ld", x, p["kernel"]) + p["bias"]


def _query_chunk_attention(query, key, value, mask, key_chunk_size=KEY_CHUNK_SIZE):
    num_kv, num_heads, k_features = key.shape
    key_chunk_size = min(key_chunk_size, num_kv)
    query = query / math.sqrt(k_features)

    def summarize_chunk(query, key, value, mask):
        attn_weights = torch.einsum("qhd,khd->qhk", query, key)
        attn_weights = torch.where(mask[:, None, :], attn_weights, torch.finfo(attn_weights.dtype).min)
        max_score = attn_weights.amax(dim=-1, keepdim=True).detach()
        exp_weights = torch.exp(attn_weights - max_score)
        exp_values = torch.einsum("vhf,qhv->qhf", value, exp_weights)
        return exp_values, exp_weights.sum(dim=-1), max_score[..., 0]

    def chunk_scanner(chunk_idx):
        key_chunk = key[chunk_idx:chunk_idx + key_chunk_size]
        value_chunk = value[chunk_idx:chunk_idx + key_chunk_size]
        mask_chunk = mask[:, chunk_idx:chunk_idx + key_chunk_size]
        return summarize_chunk(query, key_chunk, value_chunk, mask_chunk)

    chunks = [chunk_scanner(i) for i in range(0, num_kv, key_chunk_size)]
    chunk_values = torch.stack([c[0] for c in chunks])
    chunk_weights = torch.stack([c[1] for c in chunks])
    chunk_max = torch.stack([c[2] for c in chunks])

    global_max = chunk_max.amax(dim=0, keepdim=True)
    max_diffs = torch.exp(chunk_max - global_max)
    chunk_values = chunk_values * max_diffs[..., None]
    chunk_weights = chunk_weights * max_diffs

    all_values = chunk_values.sum(dim=0)
    all_weights = chunk_weights[..., None].sum(dim=0)
    return all_values / all_weights


def memory_efficient_attention(query, key, value, mask, query_chunk_size=QUERY_CHUNK_SIZE):
    """query [Lq, H, d], key/value [Lk, H, d], mask [Lq, Lk] (True = attend) -> [Lq, H, d]."""
    dtype = query.dtype
    query, key, value = (t.to(_acc(dtype)) for t in (query, key, value))  # precision=HIGHEST
    num_q = query.shape[0]
    res = []
    for chunk_idx in range(0, num_q, query_chunk_size):
        query_chunk = query[chunk_idx:chunk_idx + query_chunk_size]
        mask_chunk = mask[chunk_idx:chunk_idx + query_chunk_size]
        res.append(_query_chunk_attention(query_chunk, key, value, mask_chunk))
    return torch.cat(res, dim=0).to(dtype)


def self_attention(p, x, mask):
    query = dense_general_in(p["query"], x)
    key = dense_general_in(p["key"], x)
    value = dense_general_in(p["value"], x)
    out = memory_efficient_attention(query, key, value, mask)
    return dense_general_out(p["out"], out)


def mlp_block(p, x, dropout_rate, deterministic):
    x = dense(p["Dense_0"], x)
    x = F.gelu(x, approximate="none")
    x = dropout(x, dropout_rate, deterministic)
    x = dense(p["Dense_1"], x)
    return dropout(x, dropout_rate, deterministic)


def make_mask(keep, causal):
    """keep [Lk] (True = a real key) -> [Lq, Lk]; causal: key j only for queries i >= j."""
    length = keep.shape[0]
    mask = keep[None, :].expand(length, length)
    if causal:
        mask = mask & torch.ones(length, length, dtype=torch.bool).tril()
    return mask


def encoder_block(p, inputs, keep, *, causal=False, dropout_rate=0.1, deterministic=True):
    """Encoder1DBlock: pre-LN attention and MLP, each with its residual."""
    x = layer_norm(p["LayerNorm_0"], inputs)
    x = self_attention(p["MultiHeadDotProductAttention_1"], x, make_mask(keep, causal))
    x = dropout(x, dropout_rate, deterministic)
    x = x + inputs
    y = layer_norm(p["LayerNorm_2"], x)
    y = mlp_block(p["MlpBlock_3"], y, dropout_rate, deterministic)
    return x + y


def patchify(kernel, bias, image, patch_size):
    """image [C, H, W] -> tokens [N, D]: Flax's Conv(kernel=strides=p, VALID) as patches
    flattened (y, x, c) times the HWIO kernel flattened the same way."""
    image = image.permute(1, 2, 0)  # NCHW input -> HWC, as the JAX input pipeline has it
    h, w, c = image.shape
    gh, gw = h // patch_size, w // patch_size
    x = image.reshape(gh, patch_size, gw, patch_size, c)
    x = x.permute(0, 2, 1, 3, 4).reshape(gh * gw, patch_size * patch_size * c)
    return x @ kernel.reshape(-1, kernel.shape[-1]) + bias


def vit_apply(params, image, *, patch_size, num_layers, dropout_rate=0.1, deterministic=True):
    x = patchify(params["embedding"]["kernel"], params["embedding"]["bias"], image, patch_size)
    cls = params["cls"][0]
    x = torch.cat([cls, x], dim=0)
    t = params["Transformer"]
    x = x + t["posembed_input"]["pos_embedding"][0]
    x = dropout(x, dropout_rate, deterministic)
    keep = torch.ones(x.shape[0], dtype=torch.bool)
    for lyr in range(num_layers):
        x = encoder_block(t[f"encoderblock_{lyr}"], x, keep, dropout_rate=dropout_rate, deterministic=deterministic)
    encoded = layer_norm(t["encoder_norm"], x)
    x = encoded[0]  # classifier == 'token'
    return dense(params["head"], x)


# ---- parameters: nested dicts held by a module ---------------------------------------------

class ParamTree(nn.Module):
    """A nested dict of tensors held as parameters under the same names."""

    def __init__(self, tree):
        super().__init__()
        for name, value in tree.items():
            if isinstance(value, dict):
                self.add_module(name, ParamTree(value))
            else:
                self.register_parameter(name, nn.Parameter(value))

    def tree(self):
        out = {name: p for name, p in self._parameters.items()}
        out |= {name: m.tree() for name, m in self._modules.items()}
        return out


def lecun(*shape, fan_in):
    return torch.randn(*shape, dtype=torch.float64) / math.sqrt(fan_in)


def init_layer_norm(d):
    return {"scale": torch.ones(d, dtype=torch.float64), "bias": torch.zeros(d, dtype=torch.float64)}


def init_block(config):
    d, h, f = config.d_model, config.n_heads, config.d_ff
    hd = d // h
    qkv = {n: {"kernel": lecun(d, h, hd, fan_in=d), "bias": torch.zeros(h, hd, dtype=torch.float64)} for n in ("query", "key", "value")}
    return {
        "LayerNorm_0": init_layer_norm(d),
        "MultiHeadDotProductAttention_1": qkv | {"out": {"kernel": lecun(h, hd, d, fan_in=d), "bias": torch.zeros(d, dtype=torch.float64)}},
        "LayerNorm_2": init_layer_norm(d),
        "MlpBlock_3": {
            "Dense_0": {"kernel": lecun(d, f, fan_in=d), "bias": torch.zeros(f, dtype=torch.float64)},
            "Dense_1": {"kernel": lecun(f, d, fan_in=f), "bias": torch.zeros(d, dtype=torch.float64)},
        },
    }


def init_vit(config):
    d, p, c = config.d_model, config.patch_size, config.channels
    n = (config.image_size // p) ** 2
    t = {f"encoderblock_{i}": init_block(config) for i in range(config.n_layers)}
    t["posembed_input"] = {"pos_embedding": 0.02 * torch.randn(1, n + 1, d, dtype=torch.float64)}
    t["encoder_norm"] = init_layer_norm(d)
    return {
        "embedding": {"kernel": lecun(p, p, c, d, fan_in=p * p * c), "bias": torch.zeros(d, dtype=torch.float64)},
        "cls": torch.zeros(1, 1, d, dtype=torch.float64),
        "Transformer": t,
        "head": {"kernel": torch.zeros(d, config.n_classes, dtype=torch.float64), "bias": torch.zeros(config.n_classes, dtype=torch.float64)},
    }


class EncoderBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.params = ParamTree(init_block(config))

    def forward(self, x, keep=None, causal=False):
        if keep is None:
            keep = torch.ones(x.shape[:2], dtype=torch.bool)
        fn = partial(encoder_block, causal=causal, deterministic=not self.training)
        return vmap(fn, in_dims=(None, 0, 0), randomness="different")(self.params.tree(), x, keep)


class PatchEmbed(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.patch_size = config.patch_size
        self.params = ParamTree(init_vit(config)["embedding"])

    def forward(self, images):
        if images.dim() != 4:
            raise ValueError(f"images must be [B, C, H, W], got {tuple(images.shape)}")
        c, h, w = images.shape[1:]
        p = self.params.tree()
        if h % self.patch_size or w % self.patch_size:
            raise ValueError(f"image {h}x{w} is not divisible by the patch size {self.patch_size}")
        if c != p["kernel"].shape[2]:
            raise ValueError(f"{c} channels, the kernel takes {p['kernel'].shape[2]}")
        fn = partial(patchify, patch_size=self.patch_size)
        return vmap(fn, in_dims=(None, None, 0))(p["kernel"], p["bias"], images)


class VisionTransformer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.params = ParamTree(init_vit(config))

    def forward(self, images):
        cfg = self.config
        if images.dim() != 4 or tuple(images.shape[1:]) != (cfg.channels, cfg.image_size, cfg.image_size):
            raise ValueError(f"images must be [B, {cfg.channels}, {cfg.image_size}, {cfg.image_size}], got {tuple(images.shape)}")
        fn = partial(vit_apply, patch_size=cfg.patch_size, num_layers=cfg.n_layers, deterministic=not self.training)
        return vmap(fn, in_dims=(None, 0), randomness="different")(self.params.tree(), images)


# ---- the adapter -----------------------------------------------------------------------

from tck.adapters import Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def _block_map(prefix, mine):
    a = f"{mine}MultiHeadDotProductAttention_1."
    out = {}
    for c, n in (("q", "query"), ("k", "key"), ("v", "value")):
        out[f"{prefix}self_attn.{c}.weight"] = Param(f"{a}{n}.kernel", permute=(1, 2, 0))
        out[f"{prefix}self_attn.{c}.bias"] = Param(f"{a}{n}.bias")
    out[f"{prefix}self_attn.o.weight"] = Param(f"{a}out.kernel", permute=(2, 0, 1))
    out[f"{prefix}self_attn.o.bias"] = f"{a}out.bias"
    for canon, flax in (("norm1", "LayerNorm_0"), ("norm2", "LayerNorm_2")):
        out[f"{prefix}{canon}.weight"] = f"{mine}{flax}.scale"
        out[f"{prefix}{canon}.bias"] = f"{mine}{flax}.bias"
    for canon, flax in (("fc1", "Dense_0"), ("fc2", "Dense_1")):
        out[f"{prefix}ffn.{canon}.weight"] = Param(f"{mine}MlpBlock_3.{flax}.kernel", permute=(1, 0))
        out[f"{prefix}ffn.{canon}.bias"] = f"{mine}MlpBlock_3.{flax}.bias"
    return out


def _vit_map(config):
    out = {
        "patch_embed.weight": Param("params.embedding.kernel", permute=(3, 2, 0, 1)),
        "patch_embed.bias": "params.embedding.bias",
        "cls_token": "params.cls",
        "pos_embed": "params.Transformer.posembed_input.pos_embedding",
        "encoder.norm.weight": "params.Transformer.encoder_norm.scale",
        "encoder.norm.bias": "params.Transformer.encoder_norm.bias",
        "head.weight": Param("params.head.kernel", permute=(1, 0)),
        "head.bias": "params.head.bias",
    }
    for i in range(config.n_layers):
        out |= _block_map(f"encoder.layers.{i}.", f"params.Transformer.encoderblock_{i}.")
    return out


def layer_forward(m, x, key_padding=None, causal=False):
    keep = None if key_padding is None else torch.as_tensor(key_padding).bool()
    return m(x, keep, bool(causal))


VIT = Conventions(norm_placement="pre", activation="gelu", eps=1e-6, fully_masked_rows="uniform")

adapter = TorchModuleAdapter("flax-memvit", [
    TorchEntry("patch_embed", make=PatchEmbed, forward=lambda m, images: m(images),
               param_map={"weight": Param("params.kernel", permute=(3, 2, 0, 1)), "bias": "params.bias"}),
    TorchEntry("encoder_layer", make=EncoderBlock, forward=layer_forward,
               param_map=_block_map("", "params."), conventions=VIT),
    TorchEntry("vit", make=VisionTransformer, forward=lambda m, images: m(images),
               param_map=_vit_map, conventions=Conventions(norm_placement="pre", activation="gelu", eps=1e-6)),
])
