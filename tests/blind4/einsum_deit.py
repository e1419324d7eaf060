# fmt: off
# ruff: noqa: E501
"""A DeiT-style Vision Transformer written with explicit ``nn.Parameter`` tensors and
``torch.einsum``, the way research code that avoids ``nn.Linear`` writes it.

Every projection is a raw parameter with its head axis spelled out (``w_q`` [heads,
head_dim, dim], ``w_o`` [dim, heads, head_dim]) and contracted by ``einsum``; the patch
embedding is an einsum of the image viewed as a patch grid with a [dim, channels, p, p]
kernel; LayerNorm (eps 1e-6, DeiT's) and the exact GELU are written by hand; pre-LN blocks,
a class token with learned positions over it and the patches, a final norm and the class
token pooled into the head. The block takes an optional key-padding keep-mask and a causal
flag; a query whose keys are all masked gets zeros. In float16/bfloat16 the norm statistics
and the softmax are float32.

Written for transformer-tck's fourth blind diagnosis benchmark (tests/blind4/PROTOCOL.md).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.adapters.torch_module import Param
from tck.reference import Conventions


def _upcast(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def trunc_normal(*shape, std=0.02):
    return nn.init.trunc_normal_(torch.empty(*shape), std=std)


class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(dim))
        self.beta = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        dtype = x.dtype
        x = x.to(_upcast(dtype))
        mu = x.mean(dim=-1, keepdim=True)
        var = (x - mu).pow(2).mean(dim=-1, keepdim=True)
        x = (x - mu) / torch.sqrt(var + self.eps)
        return (x * self.gamma + self.beta).to(dtype)


def gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


class PatchEmbed(nn.Module):
    def __init__(self, img_size=16, patch_size=4, in_chans=3, embed_dim=32):
        super().__init__()
        self.patch_size = patch_size
        self.grid = img_size // patch_size
        self.kernel = nn.Parameter(trunc_normal(embed_dim, in_chans, patch_size, patch_size))
        self.bias = nn.Parameter(torch.zeros(embed_dim))

    def forward(self, img):
        b, c, h, w = img.shape
        p = self.patch_size
        patches = img.reshape(b, c, h // p, p, w // p, p)
        x = torch.einsum("bcypxq,dcpq->byxd", patches, self.kernel) + self.bias
        return x.reshape(b, (h // p) * (w // p), -1)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim ** -0.5
        self.w_q = nn.Parameter(trunc_normal(heads, self.head_dim, dim))
        self.w_k = nn.Parameter(trunc_normal(heads, self.head_dim, dim))
        self.w_v = nn.Parameter(trunc_normal(heads, self.head_dim, dim))
        self.b_q = nn.Parameter(torch.zeros(heads, self.head_dim))
        self.b_k = nn.Parameter(torch.zeros(heads, self.head_dim))
        self.b_v = nn.Parameter(torch.zeros(heads, self.head_dim))
        self.w_o = nn.Parameter(trunc_normal(dim, heads, self.head_dim))
        self.b_o = nn.Parameter(torch.zeros(dim))

    def forward(self, x, keep=None):
        q = torch.einsum("bnc,hdc->bhnd", x, self.w_q) + self.b_q[None, :, None, :]
        k = torch.einsum("bnc,hdc->bhnd", x, self.w_k) + self.b_k[None, :, None, :]
        v = torch.einsum("bnc,hdc->bhnd", x, self.w_v) + self.b_v[None, :, None, :]
        dots = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        if keep is not None:
            dots = dots.masked_fill(~keep, float("-inf"))
        attn = dots.to(_upcast(dots.dtype)).softmax(dim=-1)
        attn = torch.nan_to_num(attn, nan=0.0).to(v.dtype)
        out = torch.einsum("bhij,bhjd->bhid", attn, v)
        return torch.einsum("bhnd,chd->bnc", out, self.w_o) + self.b_o


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Parameter(trunc_normal(hidden, dim))
        self.b1 = nn.Parameter(torch.zeros(hidden))
        self.w2 = nn.Parameter(trunc_normal(dim, hidden))
        self.b2 = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        h = gelu(torch.einsum("bnc,fc->bnf", x, self.w1) + self.b1)
        return torch.einsum("bnf,cf->bnc", h, self.w2) + self.b2


class Block(nn.Module):
    def __init__(self, dim, heads, hidden, eps=1e-6):
        super().__init__()
        self.norm1 = LayerNorm(dim, eps=eps)
        self.attn = Attention(dim, heads)
        self.norm2 = LayerNorm(dim, eps=eps)
        self.mlp = FeedForward(dim, hidden)

    def forward(self, x, keep=None):
        x = x + self.attn(self.norm1(x), keep)
        x = x + self.mlp(self.norm2(x))
        return x


class DeiT(nn.Module):
    def __init__(self, img_size=16, patch_size=4, in_chans=3, num_classes=10, dim=32, depth=2, heads=4, hidden=64, eps=1e-6):
        super().__init__()
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, dim)
        num_patches = (img_size // patch_size) ** 2
        self.cls_token = nn.Parameter(trunc_normal(1, 1, dim))
        self.pos_embed = nn.Parameter(trunc_normal(1, num_patches + 1, dim))
        self.blocks = nn.ModuleList([Block(dim, heads, hidden, eps) for _ in range(depth)])
        self.norm = LayerNorm(dim, eps=eps)
        self.head_w = nn.Parameter(trunc_normal(num_classes, dim))
        self.head_b = nn.Parameter(torch.zeros(num_classes))

    def forward(self, img):
        x = self.patch_embed(img)
        cls_tokens = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)
        x = x + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        pooled = x[:, 0]
        return torch.einsum("bc,kc->bk", pooled, self.head_w) + self.head_b


# ---- the adapter -------------------------------------------------------------------------

DEIT = Conventions(norm_placement="pre", activation="gelu", eps=1e-6)


def _block_map(prefix: str, theirs: str, config) -> dict:
    d, h = config.d_model, config.n_heads
    out = {}
    for name in "qkv":
        out[f"{prefix}self_attn.{name}.weight"] = Param(f"{theirs}attn.w_{name}", shape=(d, d))
        out[f"{prefix}self_attn.{name}.bias"] = Param(f"{theirs}attn.b_{name}", shape=(d,))
    out[f"{prefix}self_attn.o.weight"] = Param(f"{theirs}attn.w_o", shape=(d, d))
    out[f"{prefix}self_attn.o.bias"] = f"{theirs}attn.b_o"
    for norm in ("norm1", "norm2"):
        out[f"{prefix}{norm}.weight"] = f"{theirs}{norm}.gamma"
        out[f"{prefix}{norm}.bias"] = f"{theirs}{norm}.beta"
    out[f"{prefix}ffn.fc1.weight"] = f"{theirs}mlp.w1"
    out[f"{prefix}ffn.fc1.bias"] = f"{theirs}mlp.b1"
    out[f"{prefix}ffn.fc2.weight"] = f"{theirs}mlp.w2"
    out[f"{prefix}ffn.fc2.bias"] = f"{theirs}mlp.b2"
    del h
    return out


def _vit_map(config) -> dict:
    out = {"patch_embed.weight": "patch_embed.kernel", "patch_embed.bias": "patch_embed.bias",
           "cls_token": "cls_token", "pos_embed": "pos_embed",
           "encoder.norm.weight": "norm.gamma", "encoder.norm.bias": "norm.beta",
           "head.weight": "head_w", "head.bias": "head_b"}
    for i in range(config.n_layers):
        out.update(_block_map(f"encoder.layers.{i}.", f"blocks.{i}.", config))
    return out


def _block_forward(block, x, key_padding=None, causal=False):
    keep = None
    if key_padding is not None:
        keep = key_padding[:, None, None, :]
    if causal:
        n = x.shape[1]
        tri = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        keep = tri[None, None] if keep is None else keep & tri[None, None]
    return block(x, keep)


adapter = TorchModuleAdapter("einsum-deit", [
    TorchEntry(
        "patch_embed",
        make=lambda config: PatchEmbed(config.image_size, config.patch_size, config.channels, config.d_model),
        forward=lambda embed, images: embed(images),
        param_map={"weight": "kernel", "bias": "bias"},
        conventions=DEIT,
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: Block(config.d_model, config.n_heads, config.d_ff),
        forward=_block_forward,
        param_map=lambda config: _block_map("", "", config),
        conventions=DEIT,
    ),
    TorchEntry(
        "vit",
        make=lambda config: DeiT(config.image_size, config.patch_size, config.channels, config.n_classes,
                                 config.d_model, config.n_layers, config.n_heads, config.d_ff),
        forward=lambda model, images: model(images),
        param_map=_vit_map,
        conventions=DEIT,
    ),
])
