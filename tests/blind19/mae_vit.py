# fmt: off
# ruff: noqa
"""The ViT of facebookresearch/mae (`models_vit.py`): a `VisionTransformer` on timm-style
`Block`s written out by hand (`qkv` one linear, `attn_drop`, `proj`; `Mlp` with `fc1` / `act` /
`fc2`; pre-LN `norm1` / `norm2`, eps 1e-6), `global_pool=True`: the patch tokens (class token
excluded) averaged, `fc_norm`, the head; the encoder's final `norm` removed, as MAE does."""
from functools import partial

import torch
import torch.nn as nn


class PatchEmbed(nn.Module):
    def __init__(self, img_size=16, patch_size=4, in_chans=3, embed_dim=32, strict_img_size=True):
        super().__init__()
        self.strict_img_size = strict_img_size
        self.img_size = (img_size, img_size)
        self.patch_size = (patch_size, patch_size)
        self.num_patches = (img_size // patch_size) * (img_size // patch_size)
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        B, C, H, W = x.shape
        if self.strict_img_size:
            assert H == self.img_size[0] and W == self.img_size[1], f"Input image size ({H}*{W}) doesn't match model."
        else:
            assert H % self.patch_size[0] == 0 and W % self.patch_size[1] == 0, "Input image size not divisible by the patch size."
        x = self.proj(x).flatten(2).transpose(1, 2)  # BCHW -> BNC
        return x


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, act_layer=nn.GELU, drop=0.):
        super().__init__()
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_features, in_features)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop1(x)
        x = self.fc2(x)
        x = self.drop2(x)
        return x


class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=True, attn_drop=0., proj_drop=0.):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim ** -0.5

        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x, mask=None):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]

        attn = (q @ k.transpose(-2, -1)) * self.scale
        if mask is not None:
            attn = attn.masked_fill(~mask[:, None], float("-inf"))
        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)

        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4., qkv_bias=True, drop=0., attn_drop=0.,
                 act_layer=nn.GELU, norm_layer=nn.LayerNorm):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = Attention(dim, num_heads=num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=drop)
        self.drop_path = nn.Identity()
        self.norm2 = norm_layer(dim)
        mlp_hidden_dim = int(dim * mlp_ratio)
        self.mlp = Mlp(in_features=dim, hidden_features=mlp_hidden_dim, act_layer=act_layer, drop=drop)

    def forward(self, x, mask=None):
        x = x + self.drop_path(self.attn(self.norm1(x), mask))
        x = x + self.drop_path(self.mlp(self.norm2(x)))
        return x


class VisionTransformer(nn.Module):
    """ Vision Transformer with support for global average pooling
    """
    def __init__(self, img_size=16, patch_size=4, in_chans=3, num_classes=10, embed_dim=32, depth=2,
                 num_heads=4, mlp_ratio=2., qkv_bias=True, drop_rate=0.1, attn_drop_rate=0.1,
                 norm_layer=partial(nn.LayerNorm, eps=1e-6), global_pool=True):
        super().__init__()
        self.num_classes = num_classes
        self.num_features = self.embed_dim = embed_dim

        self.patch_embed = PatchEmbed(img_size=img_size, patch_size=patch_size, in_chans=in_chans, embed_dim=embed_dim)
        num_patches = self.patch_embed.num_patches

        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embed_dim))
        self.pos_drop = nn.Dropout(p=drop_rate)

        self.blocks = nn.Sequential(*[
            Block(dim=embed_dim, num_heads=num_heads, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias,
                  drop=drop_rate, attn_drop=attn_drop_rate, norm_layer=norm_layer)
            for i in range(depth)])
        self.norm = norm_layer(embed_dim)
        self.head = nn.Linear(self.num_features, num_classes)

        self.global_pool = global_pool
        if self.global_pool:
            self.fc_norm = norm_layer(embed_dim)

            del self.norm  # remove the original norm

    def forward_features(self, x):
        B = x.shape[0]
        x = self.patch_embed(x)

        cls_tokens = self.cls_token.expand(B, -1, -1)  # stole cls_tokens impl from Phil Wang, thanks
        x = torch.cat((cls_tokens, x), dim=1)
        x = x + self.pos_embed
        x = self.pos_drop(x)

        for blk in self.blocks:
            x = blk(x)

        if self.global_pool:
            x = x[:, 1:, :]  # without the class token
            outcome = self.fc_norm(x).mean(dim=1)
        else:
            x = self.norm(x)
            outcome = x[:, 0]

        return outcome

    def forward(self, x):
        x = self.forward_features(x)
        x = self.head(x)
        return x


class Blocks(nn.Module):
    """The encoder subject: MAE's blocks without a final norm (removed under global_pool)."""
    def __init__(self, blocks):
        super().__init__()
        self.blocks = blocks

    def forward(self, x, mask=None):
        for blk in self.blocks:
            x = blk(x, mask)
        return x


# ---- the adapter
from tck.adapters import Chunk, ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def make_vit(config):
    return VisionTransformer(
        img_size=config.image_size, patch_size=config.patch_size, in_chans=config.channels,
        num_classes=config.n_classes, embed_dim=config.d_model, depth=config.n_layers,
        num_heads=config.n_heads, mlp_ratio=config.d_ff / config.d_model,
    )


def make_block(config):
    return Block(config.d_model, config.n_heads, mlp_ratio=config.d_ff / config.d_model, drop=0.1,
                 attn_drop=0.1, norm_layer=partial(nn.LayerNorm, eps=1e-6))


def keep_mask(x, key_padding=None, causal=None):
    B, N, _ = x.shape
    keep = torch.ones((B, N, N), dtype=torch.bool)
    if key_padding is not None:
        keep = keep & key_padding[:, None, :]
    if causal is not None and bool(causal):
        keep = keep & torch.ones((N, N), dtype=torch.bool).tril()
    return keep


def _fwd_layer(blk, x, key_padding=None, causal=None):
    return blk(x, keep_mask(x, key_padding, causal))


def _block_map(prefix, mine):
    m = {}
    for p in ("weight", "bias"):
        for i, c in enumerate("qkv"):
            m[f"{prefix}self_attn.{c}.{p}"] = Chunk(f"{mine}attn.qkv.{p}", i, 3)
        m[f"{prefix}self_attn.o.{p}"] = f"{mine}attn.proj.{p}"
        m[f"{prefix}norm1.{p}"] = f"{mine}norm1.{p}"
        m[f"{prefix}norm2.{p}"] = f"{mine}norm2.{p}"
        m[f"{prefix}ffn.fc1.{p}"] = f"{mine}mlp.fc1.{p}"
        m[f"{prefix}ffn.fc2.{p}"] = f"{mine}mlp.fc2.{p}"
    return m


def _encoder_map(config, prefix="layers.", mine="blocks."):
    m = {}
    for i in range(config.n_layers):
        m |= _block_map(f"{prefix}{i}.", f"{mine}{i}.")
    return m


def _vit_map(config):
    m = _encoder_map(config, "encoder.layers.", "blocks.")
    for p in ("weight", "bias"):
        m[f"patch_embed.{p}"] = f"patch_embed.proj.{p}"
        m[f"encoder.norm.{p}"] = f"fc_norm.{p}"
        m[f"head.{p}"] = f"head.{p}"
    m |= {"cls_token": "cls_token", "pos_embed": "pos_embed"}
    return m


MAE = Conventions(norm_placement="pre", activation="gelu", eps=1e-6, fully_masked_rows="nan")
SPACE = ConfigSpace(split_heads=True)

adapter = TorchModuleAdapter("mae-vit", [
    TorchEntry(
        "patch_embed",
        make=lambda config: PatchEmbed(config.image_size, config.patch_size, config.channels, config.d_model, strict_img_size=False),
        forward=lambda pe, images: pe(images),
        param_map={"weight": "proj.weight", "bias": "proj.bias"},
    ),
    TorchEntry(
        "encoder_layer",
        make=make_block,
        forward=_fwd_layer,
        param_map=_block_map("", ""),
        conventions=MAE, supports=SPACE,
    ),
    TorchEntry(
        "encoder",
        make=lambda config: Blocks(make_vit(config).blocks),
        forward=_fwd_layer,
        param_map=_encoder_map,
        conventions=Conventions(norm_placement="pre", activation="gelu", eps=1e-6, fully_masked_rows="nan", final_norm="never"),
        supports=SPACE,
    ),
    TorchEntry(
        "vit",
        make=make_vit,
        forward=lambda vit, images: vit(images),
        param_map=_vit_map,
        conventions=Conventions(norm_placement="pre", activation="gelu", eps=1e-6, pooling="mean"),
        supports=SPACE,
    ),
])
