# fmt: off
# ruff: noqa
"""The ViT of OpenCLIP (`open_clip/transformer.py`, `VisionTransformer`), as OpenCLIP writes it.

`conv1` patch embedding without bias, `class_embedding` (a `[width]` vector, expanded to the
batch by `_expand_token` and concatenated before the patches), `positional_embedding`
`[grid**2 + 1, width]`, `ln_pre` (here the identity: see PROTOCOL.md), a `Transformer` of
`ResidualAttentionBlock`s on `nn.MultiheadAttention` in the **LND layout** (the model permutes
`x.permute(1, 0, 2)` before and after the transformer), `ln_1` / `ln_2`, `mlp` with `c_fc`,
GELU, `c_proj`, OpenCLIP's `LayerNorm` (casts back to the input dtype), `ln_post` on the
pooled class token (`final_ln_after_pool`), and `proj`, a `[width, output_dim]` matrix without
bias, as the head (`pooled @ self.proj`).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm(nn.LayerNorm):
    """Subclass torch's LayerNorm (with cast back to input dtype)."""

    def forward(self, x: torch.Tensor):
        orig_type = x.dtype
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.to(orig_type)


class QuickGELU(nn.Module):
    # NOTE This is slower than nn.GELU or nn.SiLU and uses more GPU memory
    def forward(self, x: torch.Tensor):
        return x * torch.sigmoid(1.702 * x)


class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5, inplace=False):
        super().__init__()
        self.inplace = inplace
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x.mul_(self.gamma) if self.inplace else x * self.gamma


class ResidualAttentionBlock(nn.Module):
    def __init__(self, d_model, n_head, mlp_ratio=4.0, ls_init_value=None, act_layer=nn.GELU, norm_layer=LayerNorm):
        super().__init__()
        self.ln_1 = norm_layer(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_head)
        self.ls_1 = LayerScale(d_model, ls_init_value) if ls_init_value is not None else nn.Identity()
        self.ln_2 = norm_layer(d_model)
        mlp_width = int(d_model * mlp_ratio)
        self.mlp = nn.Sequential(OrderedDict([
            ("c_fc", nn.Linear(d_model, mlp_width)),
            ("gelu", act_layer()),
            ("c_proj", nn.Linear(mlp_width, d_model)),
        ]))
        self.ls_2 = LayerScale(d_model, ls_init_value) if ls_init_value is not None else nn.Identity()

    def attention(self, q_x, k_x=None, v_x=None, attn_mask=None, key_padding_mask=None):
        k_x = k_x if k_x is not None else q_x
        v_x = v_x if v_x is not None else q_x
        attn_mask = attn_mask.to(q_x.dtype) if attn_mask is not None and attn_mask.is_floating_point() else attn_mask
        return self.attn(q_x, k_x, v_x, need_weights=False, attn_mask=attn_mask, key_padding_mask=key_padding_mask)[0]

    def forward(self, q_x, attn_mask=None, key_padding_mask=None):
        x = q_x + self.ls_1(self.attention(q_x=self.ln_1(q_x), attn_mask=attn_mask, key_padding_mask=key_padding_mask))
        x = x + self.ls_2(self.mlp(self.ln_2(x)))
        return x


class Transformer(nn.Module):
    def __init__(self, width, layers, heads, mlp_ratio=4.0, act_layer=nn.GELU, norm_layer=LayerNorm):
        super().__init__()
        self.width = width
        self.layers = layers
        self.resblocks = nn.ModuleList([
            ResidualAttentionBlock(width, heads, mlp_ratio, act_layer=act_layer, norm_layer=norm_layer)
            for _ in range(layers)
        ])

    def forward(self, x, attn_mask=None, key_padding_mask=None):
        for r in self.resblocks:
            x = r(x, attn_mask=attn_mask, key_padding_mask=key_padding_mask)
        return x


def _expand_token(token, batch_size: int):
    return token.view(1, 1, -1).expand(batch_size, -1, -1)


class VisionTransformer(nn.Module):
    def __init__(self, image_size, patch_size, width, layers, heads, mlp_ratio, output_dim, in_chans=3,
                 act_layer=nn.GELU, norm_layer=LayerNorm, final_ln_after_pool=True):
        super().__init__()
        self.image_size = (image_size, image_size)
        self.patch_size = (patch_size, patch_size)
        self.grid_size = (image_size // patch_size, image_size // patch_size)
        self.final_ln_after_pool = final_ln_after_pool
        self.output_dim = output_dim

        self.conv1 = nn.Conv2d(in_channels=in_chans, out_channels=width, kernel_size=patch_size, stride=patch_size, bias=True)  # OpenCLIP: bias=False (PROTOCOL.md)

        scale = width ** -0.5
        self.class_embedding = nn.Parameter(scale * torch.randn(width))
        self.positional_embedding = nn.Parameter(scale * torch.randn(self.grid_size[0] * self.grid_size[1] + 1, width))
        self.ln_pre = nn.Identity()
        self.transformer = Transformer(width, layers, heads, mlp_ratio, act_layer=act_layer, norm_layer=norm_layer)
        self.ln_post = norm_layer(width)
        self.proj = nn.Parameter(scale * torch.randn(width, output_dim))

    def _global_pool(self, x):
        return x[:, 0], x[:, 1:]

    def forward(self, x: torch.Tensor):
        x = self.conv1(x)  # shape = [*, width, grid, grid]
        x = x.reshape(x.shape[0], x.shape[1], -1)  # shape = [*, width, grid ** 2]
        x = x.permute(0, 2, 1)  # shape = [*, grid ** 2, width]

        # class embeddings and positional embeddings
        x = torch.cat([_expand_token(self.class_embedding, x.shape[0]).to(x.dtype), x], dim=1)
        # shape = [*, grid ** 2 + 1, width]
        x = x + self.positional_embedding.to(x.dtype)

        x = self.ln_pre(x)
        x = x.permute(1, 0, 2)  # NLD -> LND
        x = self.transformer(x)
        x = x.permute(1, 0, 2)  # LND -> NLD

        if self.final_ln_after_pool:
            pooled, tokens = self._global_pool(x)
            pooled = self.ln_post(pooled)
        else:
            x = self.ln_post(x)
            pooled, tokens = self._global_pool(x)

        pooled = pooled @ self.proj
        return pooled


# ---- the pieces run alone: the patch embedding, one block, the stack (batch-first at the boundary)


class PatchEmbed(nn.Module):
    """The model's `conv1` and its reshape/permute, alone."""

    def __init__(self, width, patch_size, in_chans=3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels=in_chans, out_channels=width, kernel_size=patch_size, stride=patch_size, bias=True)  # OpenCLIP: bias=False (PROTOCOL.md)

    def forward(self, x):
        x = self.conv1(x)
        x = x.reshape(x.shape[0], x.shape[1], -1)
        return x.permute(0, 2, 1)


def _masks(x, key_padding, causal):
    n = x.shape[1]
    kpm = None if key_padding is None else ~torch.as_tensor(np.asarray(key_padding), dtype=torch.bool)
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1) if causal is not None and bool(causal) else None
    return mask, kpm


def block_forward(block, x, key_padding=None, causal=None):
    attn_mask, kpm = _masks(x, key_padding, causal)
    x = x.permute(1, 0, 2)  # NLD -> LND
    x = block(x, attn_mask=attn_mask, key_padding_mask=kpm)
    return x.permute(1, 0, 2)  # LND -> NLD


def patch_forward(module, images):
    p = module.conv1.kernel_size[0]
    if images.shape[-2] % p or images.shape[-1] % p:
        raise ValueError(f"image {tuple(images.shape[-2:])} is not a whole number of {p}x{p} patches")
    return module(images)


def vit_forward(model, images):
    if tuple(images.shape[-2:]) != model.image_size:
        raise ValueError(f"image size {tuple(images.shape[-2:])} is not {model.image_size}")
    return model(images)


# ---- the adapter

from tck.adapters import Chunk, ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def block_map(prefix, where):
    out = {}
    for p in ("weight", "bias"):
        for i, c in enumerate("qkv"):
            out[f"{prefix}self_attn.{c}.{p}"] = Chunk(f"{where}attn.in_proj_{p}", i, 3)
        out[f"{prefix}self_attn.o.{p}"] = f"{where}attn.out_proj.{p}"
        out[f"{prefix}norm1.{p}"] = f"{where}ln_1.{p}"
        out[f"{prefix}norm2.{p}"] = f"{where}ln_2.{p}"
        out[f"{prefix}ffn.fc1.{p}"] = f"{where}mlp.c_fc.{p}"
        out[f"{prefix}ffn.fc2.{p}"] = f"{where}mlp.c_proj.{p}"
    return out


def encoder_map(config, prefix="", where=""):
    out = {}
    for i in range(config.n_layers):
        out |= block_map(f"{prefix}layers.{i}.", f"{where}resblocks.{i}.")
    return out


def vit_map(config):
    D = config.d_model
    out = {
        "patch_embed.weight": "conv1.weight",
        "patch_embed.bias": "conv1.bias",
        "cls_token": Param("class_embedding", shape=(1, 1, D)),
        "pos_embed": Param("positional_embedding", shape=(1, (config.image_size // config.patch_size) ** 2 + 1, D)),
        "encoder.norm.weight": "ln_post.weight",
        "encoder.norm.bias": "ln_post.bias",
        "head.weight": Param("proj", permute=(1, 0)),
    }
    return out | encoder_map(config, "encoder.", "transformer.")


def make_vit(config):
    return VisionTransformer(
        image_size=config.image_size, patch_size=config.patch_size, width=config.d_model,
        layers=config.n_layers, heads=config.n_heads, mlp_ratio=config.d_ff / config.d_model,
        output_dim=config.n_classes, in_chans=config.channels,
    )


VIT = Conventions(norm_placement="pre", activation="gelu")
LAYER = Conventions(norm_placement="pre", activation="gelu")
STACK = Conventions(norm_placement="pre", activation="gelu", final_norm="never")
BIASES = {"attention": True, "ffn": True, "norm": True}
SPACE = ConfigSpace(split_heads=True, biases=BIASES)
VIT_SPACE = ConfigSpace(split_heads=True, biases=BIASES | {"head": False})

adapter = TorchModuleAdapter("openclip_vit", [
    TorchEntry(
        "patch_embed",
        make=lambda config: PatchEmbed(config.d_model, config.patch_size, config.channels),
        forward=patch_forward,
        param_map={"weight": "conv1.weight", "bias": "conv1.bias"},
        conventions=VIT,
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: ResidualAttentionBlock(config.d_model, config.n_heads, config.d_ff / config.d_model),
        forward=block_forward,
        param_map=block_map("", ""),
        conventions=LAYER,
        supports=SPACE,
    ),
    TorchEntry(
        "encoder",
        make=lambda config: Transformer(config.d_model, config.n_layers, config.n_heads, config.d_ff / config.d_model),
        forward=block_forward,
        param_map=encoder_map,
        conventions=STACK,
        supports=SPACE,
    ),
    TorchEntry(
        "vit",
        make=make_vit,
        forward=vit_forward,
        param_map=vit_map,
        conventions=VIT,
        supports=VIT_SPACE,
    ),
])
