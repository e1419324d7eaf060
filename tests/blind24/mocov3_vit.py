# fmt: off
# ruff: noqa
"""The ViT of facebookresearch/moco-v3 (`vits.py`, `VisionTransformerMoCo`): timm's
`PatchEmbed`, a class token, a FIXED 2-D sin-cos position table for the patches with a zero row
for the class token (`build_2d_sincos_position_embedding`), timm-style `Block`s written out by
hand (pre-LN `norm1` / `norm2` with eps 1e-6, `qkv` one linear, `proj`, `mlp` `fc1` / GELU /
`fc2`, stochastic depth), the final `norm`, and the head on the class token.
"""

import math
from functools import partial, reduce
from operator import mul

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import Chunk, ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def drop_path(x, drop_prob: float = 0., training: bool = False):
    """Drop paths (stochastic depth) per sample, in the main path of residual blocks."""
    if drop_prob == 0. or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)
    random_tensor.floor_()
    return x.div(keep_prob) * random_tensor


class DropPath(nn.Module):
    def __init__(self, drop_prob=None):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)


class PatchEmbed(nn.Module):
    """2D image to patch embedding (timm)."""

    def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=768, flatten=True, strict_img_size=True):
        super().__init__()
        self.img_size = (img_size, img_size)
        self.patch_size = (patch_size, patch_size)
        self.grid_size = (img_size // patch_size, img_size // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.flatten = flatten
        self.strict_img_size = strict_img_size
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.norm = nn.Identity()

    def forward(self, x):
        if x.ndim != 4:
            raise ValueError(f"expected images [B, C, H, W], got shape {tuple(x.shape)}")
        B, C, H, W = x.shape
        if self.strict_img_size:
            assert H == self.img_size[0], f"Input height ({H}) doesn't match model ({self.img_size[0]})."
            assert W == self.img_size[1], f"Input width ({W}) doesn't match model ({self.img_size[1]})."
        else:
            assert H % self.patch_size[0] == 0, f"Input height ({H}) should be divisible by patch size ({self.patch_size[0]})."
            assert W % self.patch_size[1] == 0, f"Input width ({W}) should be divisible by patch size ({self.patch_size[1]})."
        x = self.proj(x)
        if self.flatten:
            x = x.flatten(2).transpose(1, 2)  # BCHW -> BNC
        x = self.norm(x)
        return x


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU, drop=0.):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_features, out_features)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop1(x)
        x = self.fc2(x)
        x = self.drop2(x)
        return x


class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False, attn_drop=0., proj_drop=0.):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x, attn_mask=None):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # make torchscript happy (cannot use tensor as tuple)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        if attn_mask is not None:  # a keep-mask [B, 1, N or 1, N]: True = may attend
            attn = attn.masked_fill(~attn_mask, float("-inf"))
        attn = attn.softmax(dim=-1, dtype=torch.promote_types(attn.dtype, torch.float32)).to(v.dtype)
        attn = self.attn_drop(attn)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4., qkv_bias=False, drop=0., attn_drop=0., drop_path=0., act_layer=nn.GELU, norm_layer=nn.LayerNorm):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = Attention(dim, num_heads=num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=drop)
        self.drop_path = DropPath(drop_path) if drop_path > 0. else nn.Identity()
        self.norm2 = norm_layer(dim)
        mlp_hidden_dim = int(dim * mlp_ratio)
        self.mlp = Mlp(in_features=dim, hidden_features=mlp_hidden_dim, act_layer=act_layer, drop=drop)

    def forward(self, x, attn_mask=None):
        x = x + self.drop_path(self.attn(self.norm1(x), attn_mask=attn_mask))
        x = x + self.drop_path(self.mlp(self.norm2(x)))
        return x


class VisionTransformerMoCo(nn.Module):
    def __init__(self, img_size=224, patch_size=16, in_chans=3, num_classes=1000, embed_dim=768, depth=12, num_heads=12, mlp_ratio=4., qkv_bias=True, drop_rate=0., attn_drop_rate=0., drop_path_rate=0.1, norm_layer=None, stop_grad_conv1=False):
        super().__init__()
        self.num_classes = num_classes
        self.num_features = self.embed_dim = embed_dim
        self.num_tokens = 1
        norm_layer = norm_layer or partial(nn.LayerNorm, eps=1e-6)
        self.patch_embed = PatchEmbed(img_size=img_size, patch_size=patch_size, in_chans=in_chans, embed_dim=embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_drop = nn.Dropout(p=drop_rate)
        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]  # stochastic depth decay rule
        self.blocks = nn.Sequential(*[
            Block(dim=embed_dim, num_heads=num_heads, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, drop=drop_rate, attn_drop=attn_drop_rate, drop_path=dpr[i], norm_layer=norm_layer)
            for i in range(depth)])
        self.norm = norm_layer(embed_dim)
        self.head = nn.Linear(self.num_features, num_classes)

        # Use fixed 2D sin-cos position embedding
        self.build_2d_sincos_position_embedding()

        # weight initialization
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear):
                if 'qkv' in name:
                    # treat the weights of Q, K, V separately
                    val = math.sqrt(6. / float(m.weight.shape[0] // 3 + m.weight.shape[1]))
                    nn.init.uniform_(m.weight, -val, val)
                else:
                    nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.normal_(self.cls_token, std=1e-6)

        # xavier_uniform initialization
        val = math.sqrt(6. / float(3 * reduce(mul, self.patch_embed.patch_size, 1) + self.embed_dim))
        nn.init.uniform_(self.patch_embed.proj.weight, -val, val)
        nn.init.zeros_(self.patch_embed.proj.bias)

        if stop_grad_conv1:
            self.patch_embed.proj.weight.requires_grad = False
            self.patch_embed.proj.bias.requires_grad = False

    def build_2d_sincos_position_embedding(self, temperature=10000.):
        h, w = self.patch_embed.grid_size
        grid_w = torch.arange(w, dtype=torch.float64)
        grid_h = torch.arange(h, dtype=torch.float64)
        grid_w, grid_h = torch.meshgrid(grid_w, grid_h, indexing="ij")
        assert self.embed_dim % 4 == 0, 'Embed dimension must be divisible by 4 for 2D sin-cos position embedding'
        pos_dim = self.embed_dim // 4
        omega = torch.arange(pos_dim, dtype=torch.float64) / pos_dim
        omega = 1. / (temperature**omega)
        out_w = torch.einsum('m,d->md', [grid_w.flatten(), omega])
        out_h = torch.einsum('m,d->md', [grid_h.flatten(), omega])
        pos_emb = torch.cat([torch.sin(out_w), torch.cos(out_w), torch.sin(out_h), torch.cos(out_h)], dim=1)[None, :, :]

        assert self.num_tokens == 1, 'Assuming one and only one token, [cls]'
        pe_token = torch.zeros([1, 1, self.embed_dim], dtype=torch.float64)
        self.pos_embed = nn.Parameter(torch.cat([pe_token, pos_emb], dim=1).to(torch.get_default_dtype()))
        self.pos_embed.requires_grad = False

    def forward_blocks(self, x, attn_mask=None):
        for blk in self.blocks:
            x = blk(x, attn_mask=attn_mask)
        x = self.norm(x)
        return x

    def forward_features(self, x):
        x = self.patch_embed(x)
        cls_token = self.cls_token.expand(x.shape[0], -1, -1)  # stole cls_tokens impl from Phil Wang, thanks
        x = torch.cat((cls_token, x), dim=1)
        x = self.pos_drop(x + self.pos_embed)
        x = self.forward_blocks(x)
        return x[:, 0]

    def forward(self, x):
        x = self.forward_features(x)
        x = self.head(x)
        return x


# ---- the adapter ------------------------------------------------------------------------

def vit_of(config):
    return VisionTransformerMoCo(img_size=config.image_size, patch_size=config.patch_size, in_chans=config.channels, num_classes=config.n_classes, embed_dim=config.d_model, depth=config.n_layers, num_heads=config.n_heads, mlp_ratio=config.d_ff / config.d_model)


def block_of(config):
    return Block(dim=config.d_model, num_heads=config.n_heads, mlp_ratio=config.d_ff / config.d_model, qkv_bias=True, drop_path=0.1, norm_layer=partial(nn.LayerNorm, eps=1e-6))


def encoder_of(config):
    model = vit_of(config)
    del model.patch_embed, model.cls_token, model.pos_embed, model.head  # the stack alone
    return model


def keep_mask(x, key_padding=None, causal=None):
    """The kit's keep-mask (True = a real token) and causal flag as a boolean [B, 1, N or 1, N]."""
    B, N, _ = x.shape
    mask = None
    if key_padding is not None:
        mask = torch.as_tensor(key_padding, device=x.device, dtype=torch.bool)[:, None, None, :]
    if causal is not None and bool(causal):
        tri = torch.ones(N, N, dtype=torch.bool, device=x.device).tril()[None, None]
        mask = tri if mask is None else mask & tri
    return mask


def patch_forward(patch_embed, images):
    return patch_embed(images)


def layer_forward(block, x, key_padding=None, causal=None):
    return block(x, attn_mask=keep_mask(x, key_padding, causal))


def encoder_forward(model, x, key_padding=None, causal=None):
    return model.forward_blocks(x, attn_mask=keep_mask(x, key_padding, causal))


def vit_forward(model, images):
    return model(images)


def block_map(prefix=""):
    out = {}
    for p in ("weight", "bias"):
        out |= {f"self_attn.{n}.{p}": Chunk(f"{prefix}attn.qkv.{p}", i, 3) for i, n in enumerate("qkv")}
        out[f"self_attn.o.{p}"] = f"{prefix}attn.proj.{p}"
        out[f"norm1.{p}"] = f"{prefix}norm1.{p}"
        out[f"norm2.{p}"] = f"{prefix}norm2.{p}"
        out[f"ffn.fc1.{p}"] = f"{prefix}mlp.fc1.{p}"
        out[f"ffn.fc2.{p}"] = f"{prefix}mlp.fc2.{p}"
    return out


def encoder_map(config, prefix="", canonical=""):
    out = {}
    for i in range(config.n_layers):
        out |= {f"{canonical}layers.{i}.{k}": v for k, v in block_map(f"{prefix}blocks.{i}.").items()}
    out |= {f"{canonical}norm.{p}": f"{prefix}norm.{p}" for p in ("weight", "bias")}
    return out


def vit_map(config):
    out = {"patch_embed.weight": "patch_embed.proj.weight", "patch_embed.bias": "patch_embed.proj.bias"}
    out |= {"cls_token": "cls_token", "pos_embed": "pos_embed", "head.weight": "head.weight", "head.bias": "head.bias"}
    out |= encoder_map(config, canonical="encoder.")
    return out


CONVENTIONS = Conventions(norm_placement="pre", activation="gelu", eps=1e-6)
MASKED = Conventions(norm_placement="pre", activation="gelu", eps=1e-6, fully_masked_rows="nan")
SPACE = ConfigSpace(split_heads=True)

adapter = TorchModuleAdapter("mocov3-vit", [
    TorchEntry("patch_embed", make=lambda config: PatchEmbed(img_size=config.image_size, patch_size=config.patch_size, in_chans=config.channels, embed_dim=config.d_model, strict_img_size=False),
               forward=patch_forward, param_map={"weight": "proj.weight", "bias": "proj.bias"}, conventions=CONVENTIONS),
    TorchEntry("encoder_layer", make=block_of, forward=layer_forward, param_map=block_map(), conventions=MASKED, supports=SPACE),
    TorchEntry("encoder", make=encoder_of, forward=encoder_forward, param_map=encoder_map, conventions=MASKED, supports=SPACE),
    TorchEntry("vit", make=vit_of, forward=vit_forward, param_map=vit_map, conventions=CONVENTIONS, supports=SPACE),
])
