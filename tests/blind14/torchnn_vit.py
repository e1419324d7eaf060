# fmt: off
# ruff: noqa
"""A ViT assembled from torch.nn.TransformerEncoder / nn.TransformerEncoderLayer.

Layers: nn.TransformerEncoderLayer(norm_first=True, activation="gelu", batch_first=True,
dropout=0.0, layer_norm_eps=1e-6), stacked by nn.TransformerEncoder with a final nn.LayerNorm
given as its `norm`; run in eval() under torch.no_grad() the layers take PyTorch's fused fast
path (torch._transformer_encoder_layer_fwd). Patches are cut by nn.Unfold (kernel = stride =
patch) and projected by an nn.Linear over the (C, p, p)-flattened patch; a class token, a
learned position table, a head on the class token.
"""

import torch
import torch.nn as nn

from tck.adapters import Chunk, ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions

EPS = 1e-6


class PatchEmbed(nn.Module):
    def __init__(self, image_size, patch_size, in_chans, embed_dim):
        super().__init__()
        self.patch_size = patch_size
        self.num_patches = (image_size // patch_size) ** 2
        self.unfold = nn.Unfold(kernel_size=patch_size, stride=patch_size)
        self.proj = nn.Linear(in_chans * patch_size * patch_size, embed_dim)

    def forward(self, images):
        H, W = images.shape[-2:]
        if H % self.patch_size or W % self.patch_size:  # nn.Unfold would drop the remainder
            raise ValueError(f"image size {H}x{W} is not a multiple of the patch size {self.patch_size}")
        patches = self.unfold(images)  # [B, C * p * p, N], columns in (c, i, j) order
        patches = patches.transpose(1, 2)  # [B, N, C * p * p], patches in row-major order
        return self.proj(patches)


def make_layer(d_model, n_heads, d_ff):
    return nn.TransformerEncoderLayer(
        d_model, n_heads, dim_feedforward=d_ff, dropout=0.0, activation="gelu",
        layer_norm_eps=EPS, batch_first=True, norm_first=True,
    )


def make_encoder(d_model, n_heads, d_ff, n_layers):
    layer = make_layer(d_model, n_heads, d_ff)
    return nn.TransformerEncoder(layer, n_layers, norm=nn.LayerNorm(d_model, eps=EPS), enable_nested_tensor=False)


class ViT(nn.Module):
    def __init__(self, image_size, patch_size, in_chans, num_classes, d_model, n_heads, d_ff, n_layers):
        super().__init__()
        self.patch_embed = PatchEmbed(image_size, patch_size, in_chans, d_model)
        num_patches = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, d_model) * 0.02)
        self.pos_drop = nn.Dropout(p=0.1)
        self.encoder = make_encoder(d_model, n_heads, d_ff, n_layers)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, images):
        x = self.patch_embed(images)
        cls = self.cls_token.expand(x.size(0), -1, -1)
        x = torch.cat((cls, x), dim=1)
        x = self.pos_drop(x + self.pos_embed)
        x = self.encoder(x)
        return self.head(x[:, 0])


# ---- the adapter

def _layer_map(prefix, mine):
    m = {}
    for p in ("weight", "bias"):
        for i, n in enumerate("qkv"):
            m[f"{prefix}self_attn.{n}.{p}"] = Chunk(f"{mine}self_attn.in_proj_{p}", i, 3)
        m[f"{prefix}self_attn.o.{p}"] = f"{mine}self_attn.out_proj.{p}"
        m[f"{prefix}norm1.{p}"] = f"{mine}norm1.{p}"
        m[f"{prefix}norm2.{p}"] = f"{mine}norm2.{p}"
        m[f"{prefix}ffn.fc1.{p}"] = f"{mine}linear1.{p}"
        m[f"{prefix}ffn.fc2.{p}"] = f"{mine}linear2.{p}"
    return m


def _encoder_map(config, prefix="", mine=""):
    m = {}
    for i in range(config.n_layers):
        m |= _layer_map(f"{prefix}layers.{i}.", f"{mine}layers.{i}.")
    m |= {f"{prefix}norm.weight": f"{mine}norm.weight", f"{prefix}norm.bias": f"{mine}norm.bias"}
    return m


def _vit_map(config):
    m = {"patch_embed.weight": Param("patch_embed.proj.weight"), "patch_embed.bias": "patch_embed.proj.bias"}
    m |= {"cls_token": "cls_token", "pos_embed": "pos_embed", "head.weight": "head.weight", "head.bias": "head.bias"}
    m |= _encoder_map(config, "encoder.", "encoder.")
    return m


def _masks(x, key_padding, causal):
    src_key_padding_mask = None if key_padding is None else ~torch.as_tensor(key_padding, dtype=torch.bool)
    mask = None
    if causal:
        mask = nn.Transformer.generate_square_subsequent_mask(x.size(1), dtype=torch.bool)
    return mask, src_key_padding_mask


def layer_forward(module, x, key_padding=None, causal=False):
    mask, pad = _masks(x, key_padding, causal)
    return module(x, src_mask=mask, src_key_padding_mask=pad, is_causal=bool(causal))


def encoder_forward(module, x, key_padding=None, causal=False):
    mask, pad = _masks(x, key_padding, causal)
    return module(x, mask=mask, src_key_padding_mask=pad, is_causal=bool(causal))


VIT = Conventions(norm_placement="pre", activation="gelu", eps=EPS)
# a query row with every key masked comes out of nn.MultiheadAttention (and the fast path) as NaN
VIT_MASKED = Conventions(norm_placement="pre", activation="gelu", eps=EPS, fully_masked_rows="nan")

adapter = TorchModuleAdapter("torchnn-vit", [
    TorchEntry(
        "patch_embed",
        make=lambda config: PatchEmbed(config.image_size, config.patch_size, config.channels, config.d_model),
        forward=lambda module, images: module(images),
        param_map={"weight": Param("proj.weight"), "bias": "proj.bias"},
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: make_layer(config.d_model, config.n_heads, config.d_ff),
        forward=layer_forward,
        param_map=_layer_map("", ""),
        conventions=VIT_MASKED,
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "encoder",
        make=lambda config: make_encoder(config.d_model, config.n_heads, config.d_ff, config.n_layers),
        forward=encoder_forward,
        param_map=_encoder_map,
        conventions=VIT_MASKED,
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "vit",
        make=lambda config: ViT(config.image_size, config.patch_size, config.channels, config.n_classes,
                                config.d_model, config.n_heads, config.d_ff, config.n_layers),
        forward=lambda module, images: module(images),
        param_map=_vit_map,
        conventions=VIT,
        supports=ConfigSpace(split_heads=True),
    ),
])
