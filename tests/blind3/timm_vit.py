# fmt: off
# ruff: noqa: E501  (the bug tables name these lines verbatim; they stay as written)
"""A Vision Transformer for the third blind benchmark, written the way timm writes one: a
**fused qkv Linear** split by ``reshape(B, N, 3, H, d).permute(2, 0, 3, 1, 4)`` and
``unbind``, attention by ``F.scaled_dot_product_attention`` (an optional boolean mask),
pre-LN blocks without LayerScale, exact GELU, LayerNorm eps 1e-6, a class token and a
learned position table over it and the patches, a final norm and **global average pooling**
of the patch tokens (timm's ``global_pool='avg'`` with ``fc_norm=False``: the final norm,
then the mean over the patch tokens, the class token left out). The patch embedding cuts the
image into patches with ``reshape``/``permute`` and projects them with one ``nn.Linear`` whose
input features are ordered (channel, row, column) as a conv kernel is.
"""

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import Chunk, TorchEntry, TorchModuleAdapter
from tck.adapters.torch_module import Param
from tck.reference import Conventions


class PatchEmbed(nn.Module):
    def __init__(self, img_size=16, patch_size=4, in_chans=3, embed_dim=32):
        super().__init__()
        self.patch_size = patch_size
        self.grid_size = img_size // patch_size
        self.num_patches = self.grid_size ** 2
        self.proj = nn.Linear(in_chans * patch_size * patch_size, embed_dim)

    def forward(self, x):
        B, C, H, W = x.shape
        p = self.patch_size
        x = x.reshape(B, C, H // p, p, W // p, p)
        x = x.permute(0, 2, 4, 1, 3, 5)  # B, gh, gw, C, p, p
        x = x.reshape(B, (H // p) * (W // p), C * p * p)
        return self.proj(x)


class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, attn_mask=None):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=self.scale)
        x = x.transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        return x


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_features, in_features)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.fc2(x)
        return x


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_hidden, qkv_bias=True):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads=num_heads, qkv_bias=qkv_bias)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, mlp_hidden)

    def forward(self, x, attn_mask=None):
        x = x + self.attn(self.norm1(x), attn_mask=attn_mask)
        x = x + self.mlp(self.norm2(x))
        return x


class VisionTransformer(nn.Module):
    def __init__(self, img_size, patch_size, in_chans, num_classes, embed_dim, depth, num_heads, mlp_hidden):
        super().__init__()
        self.num_prefix_tokens = 1
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        num_patches = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + self.num_prefix_tokens, embed_dim) * .02)
        self.blocks = nn.Sequential(*[Block(embed_dim, num_heads, mlp_hidden) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, num_classes)

    def _pos_embed(self, x):
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        x = x + self.pos_embed
        return x

    def forward_features(self, x):
        x = self.patch_embed(x)
        x = self._pos_embed(x)
        x = self.blocks(x)
        x = self.norm(x)
        return x

    def forward_head(self, x):
        x = x[:, self.num_prefix_tokens:].mean(dim=1)
        return self.head(x)

    def forward(self, x):
        return self.forward_head(self.forward_features(x))


# ---- the adapter

CONVENTIONS = Conventions(norm_placement="pre", activation="gelu", eps=1e-6, pooling="mean")


def _layer_forward(block, x, key_padding=None, causal=False):
    mask = None
    if key_padding is not None:
        mask = key_padding.bool()[:, None, None, :]
    if causal:
        L = x.shape[1]
        tril = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
        mask = tril if mask is None else mask & tril
    return block(x, attn_mask=mask)


def _block_map(ours, theirs):
    mapping = {}
    for p in ("weight", "bias"):
        mapping |= {f"{ours}self_attn.{n}.{p}": Chunk(f"{theirs}attn.qkv.{p}", i, 3) for i, n in enumerate("qkv")}
        mapping[f"{ours}self_attn.o.{p}"] = f"{theirs}attn.proj.{p}"
        mapping[f"{ours}norm1.{p}"] = f"{theirs}norm1.{p}"
        mapping[f"{ours}norm2.{p}"] = f"{theirs}norm2.{p}"
        mapping[f"{ours}ffn.fc1.{p}"] = f"{theirs}mlp.fc1.{p}"
        mapping[f"{ours}ffn.fc2.{p}"] = f"{theirs}mlp.fc2.{p}"
    return mapping


def _vit_map(config):
    mapping = {
        "patch_embed.weight": Param("patch_embed.proj.weight"),
        "patch_embed.bias": "patch_embed.proj.bias",
        "cls_token": "cls_token",
        "pos_embed": "pos_embed",
        "encoder.norm.weight": "norm.weight",
        "encoder.norm.bias": "norm.bias",
        "head.weight": "head.weight",
        "head.bias": "head.bias",
    }
    for i in range(config.n_layers):
        mapping |= _block_map(f"encoder.layers.{i}.", f"blocks.{i}.")
    return mapping


adapter = TorchModuleAdapter("blind3-timm-vit", [
    TorchEntry(
        "patch_embed",
        make=lambda c: PatchEmbed(c.image_size, c.patch_size, c.channels, c.d_model),
        forward=lambda m, images: m(images),
        param_map={"weight": Param("proj.weight"), "bias": "proj.bias"},
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda c: Block(c.d_model, c.n_heads, c.d_ff),
        forward=_layer_forward,
        param_map=_block_map("", ""),
        conventions=CONVENTIONS,
    ),
    TorchEntry(
        "vit",
        make=lambda c: VisionTransformer(c.image_size, c.patch_size, c.channels, c.n_classes, c.d_model, c.n_layers, c.n_heads, c.d_ff),
        forward=lambda m, images: m(images),
        param_map=_vit_map,
        conventions=CONVENTIONS,
    ),
])
