# fmt: off
# ruff: noqa
"""A ViT written the way google-research/big_vision's flax ViT is, translated to torch with the
flax parameter layouts kept so that its checkpoints load unchanged: the patch embedding is a
**conv-free patchify** (the image reshaped to [B, h, w, p, p, C] channels-last and a Dense kernel
stored HWIO [p, p, C, D]), attention uses ``DenseGeneral`` kernels ([D, H, d] for q/k/v with
[H, d] biases, [H, d, D] for the output), scores by ``einsum('...qhd,...khd->...hqk')``, a mask
applied by ``where(mask, logits, finfo.min)`` (so a query whose keys are all masked averages
every value, ``fully_masked_rows="uniform"``), pre-LN blocks (flax LayerNorm eps 1e-6), exact
GELU, the class token prepended with learned positions over all tokens, a final norm, and the
class token pooled into the head. Everything else is torch.
"""

import math

import torch
from torch import nn
import torch.nn.functional as F

from tck.adapters import Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions

LN_EPS = 1e-6


def layer_norm(x, scale, bias):
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + LN_EPS) * scale + bias


class LayerNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return layer_norm(x, self.scale, self.bias)


class DenseGeneral(nn.Module):
    """flax.linen.DenseGeneral with features (heads, head_dim): kernel [D, H, d], bias [H, d]."""

    def __init__(self, dim, heads, head_dim):
        super().__init__()
        self.kernel = nn.Parameter(torch.randn(dim, heads, head_dim) / math.sqrt(dim))
        self.bias = nn.Parameter(torch.zeros(heads, head_dim))

    def forward(self, x):
        return torch.einsum("bld,dhk->blhk", x, self.kernel) + self.bias


class OutDense(nn.Module):
    """The output DenseGeneral with axis=(-2, -1): kernel [H, d, D]."""

    def __init__(self, heads, head_dim, dim):
        super().__init__()
        self.kernel = nn.Parameter(torch.randn(heads, head_dim, dim) / math.sqrt(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return torch.einsum("blhk,hkd->bld", x, self.kernel) + self.bias


class MultiHeadDotProductAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        head_dim = dim // heads
        self.query = DenseGeneral(dim, heads, head_dim)
        self.key = DenseGeneral(dim, heads, head_dim)
        self.value = DenseGeneral(dim, heads, head_dim)
        self.out = OutDense(heads, head_dim, dim)

    def forward(self, x, mask=None):
        # mask: bool [B, 1, Lq, Lk] (True = may attend) or None
        query, key, value = self.query(x), self.key(x), self.value(x)
        depth = query.shape[-1]
        query = query / math.sqrt(depth)
        logits = torch.einsum("bqhd,bkhd->bhqk", query, key)
        if mask is not None:
            big_neg = torch.finfo(logits.dtype).min
            logits = torch.where(mask, logits, big_neg)
        weights = torch.softmax(logits, dim=-1)
        attended = torch.einsum("bhqk,bkhd->bqhd", weights, value)
        return self.out(attended)


class MlpBlock(nn.Module):
    def __init__(self, dim, mlp_dim):
        super().__init__()
        self.Dense_0 = nn.Linear(dim, mlp_dim)
        self.Dense_1 = nn.Linear(mlp_dim, dim)

    def forward(self, x):
        x = self.Dense_0(x)
        x = F.gelu(x)
        return self.Dense_1(x)


class Encoder1DBlock(nn.Module):
    def __init__(self, dim, heads, mlp_dim):
        super().__init__()
        self.LayerNorm_0 = LayerNorm(dim)
        self.MultiHeadDotProductAttention_0 = MultiHeadDotProductAttention(dim, heads)
        self.LayerNorm_1 = LayerNorm(dim)
        self.MlpBlock_0 = MlpBlock(dim, mlp_dim)

    def forward(self, x, mask=None):
        y = self.LayerNorm_0(x)
        y = self.MultiHeadDotProductAttention_0(y, mask)
        x = x + y
        y = self.LayerNorm_1(x)
        y = self.MlpBlock_0(y)
        return x + y


def make_mask(x, key_padding=None, causal=False):
    L = x.shape[1]
    if key_padding is None and not causal:
        return None
    mask = torch.ones(x.shape[0], 1, L, L, dtype=torch.bool)
    if key_padding is not None:
        mask = mask & key_padding[:, None, None, :]
    if causal:
        mask = mask & torch.tril(torch.ones(L, L, dtype=torch.bool))
    return mask


class Embedding(nn.Module):
    """The conv-free patchify: [B, C, H, W] -> [B, h*w, p*p*C] channels-last -> Dense."""

    def __init__(self, channels, patch, dim):
        super().__init__()
        self.patch = patch
        self.kernel = nn.Parameter(torch.randn(patch, patch, channels, dim) / math.sqrt(patch * patch * channels))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, images):
        B, C, H, W = images.shape
        p = self.patch
        x = images.permute(0, 2, 3, 1)
        x = x.reshape(B, H // p, p, W // p, p, C)
        x = x.permute(0, 1, 3, 2, 4, 5)
        x = x.reshape(B, (H // p) * (W // p), p * p * C)
        return x @ self.kernel.reshape(p * p * C, -1) + self.bias


class VisionTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        n_patches = (cfg.image_size // cfg.patch_size) ** 2
        self.embedding = Embedding(cfg.channels, cfg.patch_size, cfg.d_model)
        self.cls = nn.Parameter(torch.zeros(1, 1, cfg.d_model))
        self.pos_embedding = nn.Parameter(torch.randn(1, n_patches + 1, cfg.d_model) * 0.02)
        self.encoderblocks = nn.ModuleList([Encoder1DBlock(cfg.d_model, cfg.n_heads, cfg.d_ff) for _ in range(cfg.n_layers)])
        self.encoder_norm = LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.n_classes)

    def forward(self, images):
        x = self.embedding(images)
        cls = self.cls.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1)
        x = x + self.pos_embedding
        for block in self.encoderblocks:
            x = block(x)
        x = self.encoder_norm(x)
        x = x[:, 0]
        return self.head(x)


# ---- the adapter: flax layouts -> canonical names ----

def block_map(prefix, canonical):
    out = {}
    attn = prefix + "MultiHeadDotProductAttention_0."
    for n, mine in (("q", "query"), ("k", "key"), ("v", "value")):
        out[f"{canonical}self_attn.{n}.weight"] = Param(f"{attn}{mine}.kernel", permute=(1, 2, 0))
        out[f"{canonical}self_attn.{n}.bias"] = Param(f"{attn}{mine}.bias")
    out[f"{canonical}self_attn.o.weight"] = Param(f"{attn}out.kernel", permute=(2, 0, 1))
    out[f"{canonical}self_attn.o.bias"] = f"{attn}out.bias"
    for n, mine in (("norm1", "LayerNorm_0"), ("norm2", "LayerNorm_1")):
        out[f"{canonical}{n}.weight"] = f"{prefix}{mine}.scale"
        out[f"{canonical}{n}.bias"] = f"{prefix}{mine}.bias"
    for n, mine in (("fc1", "Dense_0"), ("fc2", "Dense_1")):
        out[f"{canonical}ffn.{n}.weight"] = f"{prefix}MlpBlock_0.{mine}.weight"
        out[f"{canonical}ffn.{n}.bias"] = f"{prefix}MlpBlock_0.{mine}.bias"
    return out


PATCH_MAP = {"weight": Param("kernel", permute=(3, 2, 0, 1)), "bias": "bias"}


def vit_map(cfg):
    out = {"patch_embed.weight": Param("embedding.kernel", permute=(3, 2, 0, 1)), "patch_embed.bias": "embedding.bias"}
    out["cls_token"] = "cls"
    out["pos_embed"] = "pos_embedding"
    for i in range(cfg.n_layers):
        out |= block_map(f"encoderblocks.{i}.", f"encoder.layers.{i}.")
    out["encoder.norm.weight"] = "encoder_norm.scale"
    out["encoder.norm.bias"] = "encoder_norm.bias"
    out["head.weight"] = "head.weight"
    out["head.bias"] = "head.bias"
    return out


CONVENTIONS = Conventions(norm_placement="pre", activation="gelu", eps=1e-6, fully_masked_rows="uniform")

adapter = TorchModuleAdapter("bigvision-vit", [
    TorchEntry("patch_embed", make=lambda cfg: Embedding(cfg.channels, cfg.patch_size, cfg.d_model),
               forward=lambda m, images: m(images), param_map=PATCH_MAP, conventions=CONVENTIONS),
    TorchEntry("encoder_layer", make=lambda cfg: Encoder1DBlock(cfg.d_model, cfg.n_heads, cfg.d_ff),
               forward=lambda m, x, key_padding=None, causal=False: m(x, make_mask(x, key_padding, bool(causal))),
               param_map=block_map("", ""), conventions=CONVENTIONS),
    TorchEntry("vit", make=VisionTransformer, forward=lambda m, images: m(images),
               param_map=vit_map, conventions=CONVENTIONS),
])
