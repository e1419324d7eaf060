"""A Vision Transformer that cuts patches with ``Tensor.unfold`` (blind benchmark implementation).

No convolution: the image is unfolded into ``p x p`` tiles, flattened channel-major and fed to
an ``nn.Linear`` patch projection. Blocks are pre-LN with a fused ``qkv`` Linear whose output is
read as ``[3, heads, head_dim]`` and attention through ``F.scaled_dot_product_attention``; exact
GELU, LayerNorm eps 1e-6, class token with its own position row, class-token pooling.

The adapter at the bottom (``adapter``) exposes patch_embed, encoder_layer (one block) and vit.
This file is correct; tests/blind/bugs.json holds one-line changes to it.
"""

# bugs.json names lines of this file verbatim: the formatter must not rewrite them.
# fmt: off
# ruff: noqa: E501
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import Chunk, Param, TorchEntry, TorchModuleAdapter
from tck.adapters.base import Unsupported
from tck.reference import Config, Conventions

EPS = 1e-6


class PatchEmbed(nn.Module):
    def __init__(self, channels: int, dim: int, patch: int):
        super().__init__()
        self.patch = patch
        self.proj = nn.Linear(channels * patch * patch, dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        b, c, h, w = images.shape
        p = self.patch
        if h % p or w % p:
            raise ValueError(f"image {h}x{w} is not divisible into {p}x{p} patches")
        tiles = images.unfold(2, p, p).unfold(3, p, p)  # [B, C, H/p, W/p, p, p]
        tiles = tiles.permute(0, 2, 3, 1, 4, 5)  # grid row, grid column, then (c, y, x)
        tiles = tiles.reshape(b, (h // p) * (w // p), c * p * p)
        return self.proj(tiles)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int, eps: float = EPS):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def attention(self, x: torch.Tensor, key_padding: torch.Tensor | None = None) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        keep = None if key_padding is None else key_padding[:, None, None, :]  # SDPA: True = attend
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        out = out.transpose(1, 2).reshape(b, n, c)
        return self.proj(out)

    def forward(self, x: torch.Tensor, key_padding: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attention(self.norm1(x), key_padding)
        x = x + self.fc2(F.gelu(self.fc1(self.norm2(x))))
        return x


class VisionTransformer(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.image_size = c.image_size
        self.patch_embed = PatchEmbed(c.channels, c.d_model, c.patch_size)
        self.cls_token = nn.Parameter(torch.randn(1, 1, c.d_model) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, c.n_patches + 1, c.d_model) * 0.02)
        self.blocks = nn.ModuleList(Block(c.d_model, c.n_heads, c.d_ff) for _ in range(c.n_layers))
        self.norm = nn.LayerNorm(c.d_model, eps=EPS)
        self.head = nn.Linear(c.d_model, c.n_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.ndim != 4 or images.shape[-2:] != (self.image_size, self.image_size):
            raise ValueError(f"expected images [B, C, {self.image_size}, {self.image_size}], got {tuple(images.shape)}")
        x = self.patch_embed(images)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        return self.head(x[:, 0])


# --------------------------------------------------------------------------- the adapter


def _check(c: Config) -> Config:
    if c.head_dim_k * c.n_heads != c.d_model or c.head_dim_v != c.head_dim_k:
        raise Unsupported("heads are d_model / n_heads wide for q, k and v here")
    return c


def _block_map(ours: str, theirs: str) -> dict[str, object]:
    mapping: dict[str, object] = {}
    for p in ("weight", "bias"):
        for i, part in enumerate("qkv"):
            mapping[f"{ours}self_attn.{part}.{p}"] = Chunk(f"{theirs}qkv.{p}", i, 3)
        mapping[f"{ours}self_attn.o.{p}"] = f"{theirs}proj.{p}"
        mapping[f"{ours}norm1.{p}"] = f"{theirs}norm1.{p}"
        mapping[f"{ours}norm2.{p}"] = f"{theirs}norm2.{p}"
        mapping[f"{ours}ffn.fc1.{p}"] = f"{theirs}fc1.{p}"
        mapping[f"{ours}ffn.fc2.{p}"] = f"{theirs}fc2.{p}"
    return mapping


def _patch_map(ours: str, theirs: str, c: Config) -> dict[str, object]:
    shape = (c.d_model, c.channels, c.patch_size, c.patch_size)
    return {f"{ours}weight": Param(f"{theirs}proj.weight", shape=shape), f"{ours}bias": f"{theirs}proj.bias"}


def _vit_map(c: Config) -> dict[str, object]:
    mapping: dict[str, object] = {"cls_token": "cls_token", "pos_embed": "pos_embed"}
    mapping.update(_patch_map("patch_embed.", "patch_embed.", c))
    for i in range(c.n_layers):
        mapping.update(_block_map(f"encoder.layers.{i}.", f"blocks.{i}."))
    mapping.update({"encoder.norm.weight": "norm.weight", "encoder.norm.bias": "norm.bias"})
    mapping.update({"head.weight": "head.weight", "head.bias": "head.bias"})
    return mapping


VIT = Conventions(norm_placement="pre", activation="gelu", eps=EPS)
BIASED = {"attention_bias": True, "ffn_bias": True, "norm_bias": True, "head_bias": True}


def _entries() -> list[TorchEntry]:
    return [
        TorchEntry(
            "patch_embed",
            make=lambda c: PatchEmbed(c.channels, c.d_model, c.patch_size),
            forward=lambda m, images: m(images),
            param_map=lambda c: _patch_map("", "", c),
            conventions=VIT,
        ),
        TorchEntry(
            "encoder_layer",
            make=lambda c: Block(_check(c).d_model, c.n_heads, c.d_ff),
            forward=lambda m, x, key_padding=None: m(x, key_padding),
            param_map=_block_map("", ""),
            conventions=VIT,
            config=BIASED,
            notes=("One ViT block; it takes a key-padding mask but no causal mask.",),
        ),
        TorchEntry(
            "vit",
            make=lambda c: VisionTransformer(_check(c)),
            forward=lambda m, images: m(images),
            param_map=_vit_map,
            conventions=VIT,
            config=BIASED,
        ),
    ]


adapter = TorchModuleAdapter("blind.unfold_vit", _entries(), devices=("cpu",))

__all__ = ["VisionTransformer", "adapter"]
