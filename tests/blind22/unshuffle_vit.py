# fmt: off
# ruff: noqa
"""A Vision Transformer that patchifies with `F.pixel_unshuffle(images, patch)`: each p x p
block becomes C * p * p channels ordered (c, p1, p2), the grid is flattened row-major by
`flatten(2).transpose(1, 2)` and a linear maps each patch to the width. Attention runs on
(batch * heads, seq, head_dim) tensors with `torch.baddbmm` (the scores are
`baddbmm(empty, q, k^T, beta=0, alpha=scale)`, or `baddbmm(bias, q, k^T, beta=1, alpha=scale)`
when an additive mask is given) and `torch.bmm`; a class token, a learned position embedding,
pre-LN blocks with a GELU MLP, a final LayerNorm and the class token's head.
"""

import torch
import torch.nn.functional as F
from torch import nn


class PatchEmbed(nn.Module):
    def __init__(self, img_size=16, patch_size=4, in_chans=3, embed_dim=32):
        super().__init__()
        self.img_size = img_size
        self.patch_size = patch_size
        self.in_chans = in_chans
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Linear(in_chans * patch_size * patch_size, embed_dim)

    def forward(self, images):
        if images.ndim != 4 or images.shape[1] != self.in_chans:
            raise ValueError(f"expected [B, {self.in_chans}, H, W] images, got {tuple(images.shape)}")
        if images.shape[-2] % self.patch_size or images.shape[-1] % self.patch_size:
            raise ValueError(f"image size {tuple(images.shape[-2:])} is not a multiple of {self.patch_size}")
        x = F.pixel_unshuffle(images, self.patch_size)  # [B, C*p*p, H/p, W/p], channels (c, p1, p2)
        x = x.flatten(2).transpose(1, 2)  # [B, N, C*p*p], patches row-major
        return self.proj(x)


class Attention(nn.Module):
    def __init__(self, dim, num_heads=4, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x, attn_bias=None):
        B, N, C = x.shape
        H, d = self.num_heads, self.head_dim
        qkv = self.qkv(x).reshape(B, N, 3, H, d).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0].reshape(B * H, N, d), qkv[1].reshape(B * H, N, d), qkv[2].reshape(B * H, N, d)
        if attn_bias is None:
            scores = torch.baddbmm(torch.empty(B * H, N, N, dtype=q.dtype, device=q.device), q, k.transpose(1, 2), beta=0, alpha=self.scale)
        else:
            bias = attn_bias.expand(B, H, N, N).reshape(B * H, N, N)
            scores = torch.baddbmm(bias, q, k.transpose(1, 2), beta=1, alpha=self.scale)
        attn = scores.softmax(dim=-1)
        attn = self.attn_drop(attn)
        out = torch.bmm(attn, v)  # [B*H, N, d]
        out = out.view(B, H, N, d).transpose(1, 2).reshape(B, N, C)
        out = self.proj(out)
        return self.proj_drop(out)


class Mlp(nn.Module):
    def __init__(self, dim, hidden, drop=0.0):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        x = self.drop(self.act(self.fc1(x)))
        return self.drop(self.fc2(x))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_hidden, eps=1e-6, drop=0.1):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = Attention(dim, num_heads, attn_drop=drop, proj_drop=drop)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, mlp_hidden, drop=drop)

    def forward(self, x, attn_bias=None):
        x = x + self.attn(self.norm1(x), attn_bias)
        x = x + self.mlp(self.norm2(x))
        return x


class Encoder(nn.Module):
    def __init__(self, dim, depth, num_heads, mlp_hidden, eps=1e-6):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim, num_heads, mlp_hidden, eps) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=eps)

    def forward(self, x, attn_bias=None):
        for blk in self.blocks:
            x = blk(x, attn_bias)
        return self.norm(x)


class UnshuffleViT(nn.Module):
    def __init__(self, img_size=16, patch_size=4, in_chans=3, num_classes=10, embed_dim=32, depth=2,
                 num_heads=4, mlp_hidden=64, eps=1e-6, drop=0.1):
        super().__init__()
        self.img_size = img_size
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        num_patches = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, embed_dim) * 0.02)
        self.pos_drop = nn.Dropout(drop)
        self.encoder = Encoder(embed_dim, depth, num_heads, mlp_hidden, eps)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, images):
        if tuple(images.shape[-2:]) != (self.img_size, self.img_size):
            raise ValueError(f"expected {self.img_size}x{self.img_size} images, got {tuple(images.shape[-2:])}")
        x = self.patch_embed(images)
        cls_tokens = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)
        x = self.pos_drop(x + self.pos_embed)
        x = self.encoder(x)
        return self.head(x[:, 0])


# ---- the adapter ----------------------------------------------------------------------------

from tck.adapters import Chunk, ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def attention_bias(x, key_padding=None, causal=None):
    """Keep-masks as the additive bias baddbmm adds: 0 where a key is kept, -inf elsewhere."""
    B, N, _ = x.shape
    keep = torch.ones(B, 1, N, N, dtype=torch.bool)
    if key_padding is not None:
        if tuple(key_padding.shape) != (B, N):
            raise ValueError(f"key padding mask of shape {tuple(key_padding.shape)}, expected {(B, N)}")
        keep = keep & torch.as_tensor(key_padding, dtype=torch.bool).view(B, 1, 1, N)
    if causal is not None and bool(causal):
        keep = keep & torch.ones(N, N, dtype=torch.bool).tril()
    if key_padding is None and not (causal is not None and bool(causal)):
        return None
    return torch.zeros(keep.shape, dtype=x.dtype).masked_fill(~keep, float("-inf"))


def _block_map(prefix, dim):
    out = {}
    for p in ("weight", "bias"):
        out |= {f"self_attn.{n}.{p}": Chunk(f"{prefix}attn.qkv.{p}", i, 3) for i, n in enumerate("qkv")}
        out[f"self_attn.o.{p}"] = f"{prefix}attn.proj.{p}"
        out[f"norm1.{p}"] = f"{prefix}norm1.{p}"
        out[f"norm2.{p}"] = f"{prefix}norm2.{p}"
        out[f"ffn.fc1.{p}"] = f"{prefix}mlp.fc1.{p}"
        out[f"ffn.fc2.{p}"] = f"{prefix}mlp.fc2.{p}"
    return out


def _encoder_map(config, prefix=""):
    out = {}
    for i in range(config.n_layers):
        out |= {f"layers.{i}.{k}": v for k, v in _block_map(f"{prefix}blocks.{i}.", config.d_model).items()}
    out["norm.weight"], out["norm.bias"] = f"{prefix}norm.weight", f"{prefix}norm.bias"
    return out


def _patch_map(config, prefix=""):
    # the spec's [D, C, p, p] kernel flattened (c, y, x) is the linear's [D, C*p*p] weight:
    # pixel_unshuffle's channel c*p*p + y*p + x holds pixel (c, y, x) of the patch
    p, c, d = config.patch_size, config.channels, config.d_model
    return {"weight": Param(f"{prefix}proj.weight", shape=(d, c, p, p)), "bias": f"{prefix}proj.bias"}


def _vit_map(config):
    out = {f"patch_embed.{k}": v for k, v in _patch_map(config, "patch_embed.").items()}
    out |= {"cls_token": "cls_token", "pos_embed": "pos_embed", "head.weight": "head.weight", "head.bias": "head.bias"}
    out |= {f"encoder.{k}": v for k, v in _encoder_map(config, "encoder.").items()}
    return out


def _vit(config):
    return UnshuffleViT(config.image_size, config.patch_size, config.channels, config.n_classes, config.d_model,
                        config.n_layers, config.n_heads, config.d_ff)


VIT = Conventions(norm_placement="pre", activation="gelu", eps=1e-6, fully_masked_rows="nan")
SPACE = ConfigSpace(split_heads=True)

adapter = TorchModuleAdapter("unshuffle-vit", [
    TorchEntry(
        "patch_embed",
        make=lambda config: PatchEmbed(config.image_size, config.patch_size, config.channels, config.d_model),
        forward=lambda m, images: m(images),
        param_map=_patch_map,
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: Block(config.d_model, config.n_heads, config.d_ff),
        forward=lambda m, x, key_padding=None, causal=None: m(x, attention_bias(x, key_padding, causal)),
        param_map=lambda config: _block_map("", config.d_model),
        conventions=VIT,
        supports=SPACE,
    ),
    TorchEntry(
        "encoder",
        make=lambda config: Encoder(config.d_model, config.n_layers, config.n_heads, config.d_ff),
        forward=lambda m, x, key_padding=None, causal=None: m(x, attention_bias(x, key_padding, causal)),
        param_map=_encoder_map,
        conventions=VIT,
        supports=SPACE,
    ),
    TorchEntry(
        "vit",
        make=_vit,
        forward=lambda m, images: m(images),
        param_map=_vit_map,
        conventions=Conventions(norm_placement="pre", activation="gelu", eps=1e-6),
        supports=SPACE,
    ),
])
