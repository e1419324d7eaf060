# fmt: off
# ruff: noqa: E501
"""A Vision Transformer with a convolutional patch embedding (``Conv2d`` with stride = kernel
= patch size, then ``flatten(2).transpose(1, 2)``), a learned class token prepended and a
learned position table added, pre-LN blocks, the exact GELU, a final LayerNorm and a linear
head on the class token. Its attention is written the way fairseq writes it: time-first
hidden states ``[L, B, D]``, the queries scaled before the product, heads folded into the
batch (``[B * H, L, d]``) and ``torch.bmm``.

Correct as written; tests/blind2/bugs.json lists one-line bugs of it (the blind benchmark).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Config, Conventions

LN_EPS = 1e-6


class PatchEmbed(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.patch_size = config.patch_size
        self.proj = nn.Conv2d(config.channels, config.d_model, kernel_size=config.patch_size, stride=config.patch_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.shape[-1] % self.patch_size or images.shape[-2] % self.patch_size:
            raise ValueError(f"image size {tuple(images.shape[-2:])} is not a multiple of the patch size {self.patch_size}")
        x = self.proj(images)  # [B, D, S/p, S/p]
        x = x.flatten(2).transpose(1, 2)  # [B, N, D], row-major over the patch grid
        return x


class MultiheadSelfAttention(nn.Module):
    """Time-first self-attention: x [L, B, D]."""

    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        tgt_len, bsz, embed_dim = x.size()
        q = self.q_proj(x)
        k = self.k_proj(x)
        v = self.v_proj(x)
        q = q * self.scaling
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))  # [B * H, L, L]
        if key_padding_mask is not None:  # [B, L], True = padding
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, -1)
            attn_weights = attn_weights.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, -1)
        attn_weights = F.softmax(attn_weights, dim=-1)
        attn = torch.bmm(attn_weights, v)  # [B * H, L, d]
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(attn)


class Mlp(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.d_ff)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(config.d_ff, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model, eps=LN_EPS)
        self.attn = MultiheadSelfAttention(config.d_model, config.n_heads)
        self.ln_2 = nn.LayerNorm(config.d_model, eps=LN_EPS)
        self.mlp = Mlp(config)

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:  # x [L, B, D]
        x = x + self.attn(self.ln_1(x), key_padding_mask)
        x = x + self.mlp(self.ln_2(x))
        return x


class VisionTransformer(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        d = config.d_model
        self.patch_embed = PatchEmbed(config)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embed = nn.Parameter(torch.randn(1, config.n_patches + 1, d) * 0.02)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(d, eps=LN_EPS)
        self.head = nn.Linear(d, config.n_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images)
        cls_tokens = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)
        x = x + self.pos_embed
        x = x.transpose(0, 1)  # time-first for the blocks
        for blk in self.blocks:
            x = blk(x)
        x = x.transpose(0, 1)
        x = self.norm(x)
        return self.head(x[:, 0])


# ---------------------------------------------------------------- the adapter

def block_map(ours: str, theirs: str) -> dict:
    mapping = {}
    for p in ("weight", "bias"):
        for canonical in "qkvo":
            mine = "out_proj" if canonical == "o" else f"{canonical}_proj"
            mapping[f"{ours}self_attn.{canonical}.{p}"] = f"{theirs}attn.{mine}.{p}"
        mapping[f"{ours}norm1.{p}"] = f"{theirs}ln_1.{p}"
        mapping[f"{ours}norm2.{p}"] = f"{theirs}ln_2.{p}"
        mapping[f"{ours}ffn.fc1.{p}"] = f"{theirs}mlp.fc1.{p}"
        mapping[f"{ours}ffn.fc2.{p}"] = f"{theirs}mlp.fc2.{p}"
    return mapping


def vit_map(c: Config) -> dict:
    mapping = {
        "patch_embed.weight": "patch_embed.proj.weight", "patch_embed.bias": "patch_embed.proj.bias",
        "cls_token": "cls_token", "pos_embed": "pos_embed",
        "encoder.norm.weight": "norm.weight", "encoder.norm.bias": "norm.bias",
        "head.weight": "head.weight", "head.bias": "head.bias",
    }
    for i in range(c.n_layers):
        mapping |= block_map(f"encoder.layers.{i}.", f"blocks.{i}.")
    return mapping


VIT = Conventions(norm_placement="pre", activation="gelu", eps=LN_EPS)
# masked_fill(-inf): a query whose keys are all padding comes out as NaN
LAYER = Conventions(norm_placement="pre", activation="gelu", eps=LN_EPS, fully_masked_rows="nan")


def layer_forward(layer, x, key_padding=None):
    padding = None if key_padding is None else ~key_padding  # fairseq: True marks padding
    return layer(x.transpose(0, 1), padding).transpose(0, 1)


adapter = TorchModuleAdapter("conv-vit", [
    TorchEntry("patch_embed", make=PatchEmbed, forward=lambda m, images: m(images),
               param_map={"weight": "proj.weight", "bias": "proj.bias"}),
    TorchEntry("encoder_layer", make=Block, forward=layer_forward, param_map=block_map("", ""), conventions=LAYER),
    TorchEntry("vit", make=VisionTransformer, forward=lambda m, images: m(images),
               param_map=vit_map, conventions=VIT),
])
