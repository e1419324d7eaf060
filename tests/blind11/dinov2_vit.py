# fmt: off
# ruff: noqa
"""A ViT written the way facebookresearch/dinov2 writes it (dinov2/models/vision_transformer.py
and dinov2/layers/): PatchEmbed (a Conv2d, flatten(2).transpose(1, 2)), prepare_tokens_with_masks
(class token, interpolate_pos_encoding), NestedTensorBlock-style Blocks with ls1/ls2 LayerScale
(nn.Identity when init_values is None) and drop_path, an Attention with a fused qkv reshaped
to (3, B, H, N, hd), an additive attention bias as the memory-efficient attention takes it
(xformers' attn_bias), Mlp with exact GELU, the final norm, and a linear head on the normed
class token (x_norm_clstoken)."""

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn


def make_2tuple(x):
    if isinstance(x, tuple):
        assert len(x) == 2
        return x
    assert isinstance(x, int)
    return (x, x)


class PatchEmbed(nn.Module):
    """2D image to patch embedding: (B,C,H,W) -> (B,N,D)"""

    def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=768, flatten_embedding=True):
        super().__init__()
        image_HW = make_2tuple(img_size)
        patch_HW = make_2tuple(patch_size)
        patch_grid_size = (image_HW[0] // patch_HW[0], image_HW[1] // patch_HW[1])
        self.img_size = image_HW
        self.patch_size = patch_HW
        self.patches_resolution = patch_grid_size
        self.num_patches = patch_grid_size[0] * patch_grid_size[1]
        self.in_chans = in_chans
        self.embed_dim = embed_dim
        self.flatten_embedding = flatten_embedding
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_HW, stride=patch_HW)

    def forward(self, x):
        _, _, H, W = x.shape
        patch_H, patch_W = self.patch_size
        assert H % patch_H == 0, f"Input image height {H} is not a multiple of patch height {patch_H}"
        assert W % patch_W == 0, f"Input image width {W} is not a multiple of patch width: {patch_W}"
        x = self.proj(x)  # B C H W
        H, W = x.size(2), x.size(3)
        x = x.flatten(2).transpose(1, 2)  # B HW C
        if not self.flatten_embedding:
            x = x.reshape(-1, H, W, self.embed_dim)  # B H W C
        return x


def build_attn_bias(key_padding, causal, n, dtype):
    """An additive bias [B or 1, 1, N, N]: 0 where a query may attend a key, the dtype's most
    negative number elsewhere (a fully masked row then averages every value)."""
    keep = torch.ones(1, 1, n, n, dtype=torch.bool)
    if causal:
        keep = keep & torch.ones(n, n, dtype=torch.bool).tril()[None, None]
    if key_padding is not None:
        keep = keep & key_padding[:, None, None, :]
    bias = torch.zeros(keep.shape, dtype=dtype)
    return bias.masked_fill(~keep, torch.finfo(dtype).min)


class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False, proj_bias=True, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x, attn_bias=None):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]
        attn = q @ k.transpose(-2, -1)
        if attn_bias is not None:
            attn = torch.maximum(attn + attn_bias, torch.tensor(torch.finfo(attn.dtype).min, dtype=attn.dtype))
        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU, drop=0.0, bias=True):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features, bias=bias)
        self.act = act_layer()
        self.fc2 = nn.Linear(hidden_features, out_features, bias=bias)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop(x)
        x = self.fc2(x)
        x = self.drop(x)
        return x


class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5, inplace=False):
        super().__init__()
        self.inplace = inplace
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x.mul_(self.gamma) if self.inplace else x * self.gamma


def drop_path(x, drop_prob=0.0, training=False):
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0:
        random_tensor.div_(keep_prob)
    return x * random_tensor


class DropPath(nn.Module):
    def __init__(self, drop_prob=None):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0, qkv_bias=False, proj_bias=True, ffn_bias=True, drop=0.0,
                 attn_drop=0.0, init_values=None, drop_path=0.0, act_layer=nn.GELU, norm_layer=nn.LayerNorm):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = Attention(dim, num_heads=num_heads, qkv_bias=qkv_bias, proj_bias=proj_bias, attn_drop=attn_drop, proj_drop=drop)
        self.ls1 = LayerScale(dim, init_values=init_values) if init_values else nn.Identity()
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = norm_layer(dim)
        mlp_hidden_dim = int(dim * mlp_ratio)
        self.mlp = Mlp(in_features=dim, hidden_features=mlp_hidden_dim, act_layer=act_layer, drop=drop, bias=ffn_bias)
        self.ls2 = LayerScale(dim, init_values=init_values) if init_values else nn.Identity()
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x, attn_bias=None):
        def attn_residual_func(x):
            return self.ls1(self.attn(self.norm1(x), attn_bias))

        def ffn_residual_func(x):
            return self.ls2(self.mlp(self.norm2(x)))

        x = x + self.drop_path1(attn_residual_func(x))
        x = x + self.drop_path2(ffn_residual_func(x))
        return x


class DinoVisionTransformer(nn.Module):
    def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=768, depth=12, num_heads=12,
                 mlp_ratio=4.0, qkv_bias=True, ffn_bias=True, proj_bias=True, drop_path_rate=0.1,
                 init_values=None, num_classes=0, interpolate_offset=0.1):
        super().__init__()
        norm_layer = partial(nn.LayerNorm, eps=1e-6)
        self.num_features = self.embed_dim = embed_dim
        self.num_tokens = 1
        self.n_blocks = depth
        self.num_heads = num_heads
        self.patch_size = patch_size
        self.interpolate_offset = interpolate_offset

        self.patch_embed = PatchEmbed(img_size=img_size, patch_size=patch_size, in_chans=in_chans, embed_dim=embed_dim)
        num_patches = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + self.num_tokens, embed_dim))
        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]  # stochastic depth decay rule
        self.blocks = nn.ModuleList([
            Block(dim=embed_dim, num_heads=num_heads, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, proj_bias=proj_bias,
                  ffn_bias=ffn_bias, drop_path=dpr[i], norm_layer=norm_layer, init_values=init_values)
            for i in range(depth)
        ])
        self.norm = norm_layer(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        nn.init.normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)

    def interpolate_pos_encoding(self, x, w, h):
        previous_dtype = x.dtype
        npatch = x.shape[1] - 1
        N = self.pos_embed.shape[1] - 1
        if npatch == N and w == h:
            return self.pos_embed
        pos_embed = self.pos_embed.float()
        class_pos_embed = pos_embed[:, 0]
        patch_pos_embed = pos_embed[:, 1:]
        dim = x.shape[-1]
        w0 = w // self.patch_size
        h0 = h // self.patch_size
        M = int(math.sqrt(N))  # Recover the number of patches in each dimension
        assert N == M * M
        sx = float(w0 + self.interpolate_offset) / M
        sy = float(h0 + self.interpolate_offset) / M
        patch_pos_embed = nn.functional.interpolate(
            patch_pos_embed.reshape(1, M, M, dim).permute(0, 3, 1, 2), scale_factor=(sx, sy), mode="bicubic")
        patch_pos_embed = patch_pos_embed.permute(0, 2, 3, 1).view(1, -1, dim)
        return torch.cat((class_pos_embed.unsqueeze(0), patch_pos_embed), dim=1).to(previous_dtype)

    def prepare_tokens_with_masks(self, x, masks=None):
        B, nc, w, h = x.shape
        x = self.patch_embed(x)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        x = x + self.interpolate_pos_encoding(x, w, h)
        return x

    def forward_features(self, x, masks=None):
        x = self.prepare_tokens_with_masks(x, masks)
        for blk in self.blocks:
            x = blk(x)
        x_norm = self.norm(x)
        return {
            "x_norm_clstoken": x_norm[:, 0],
            "x_norm_patchtokens": x_norm[:, self.num_tokens :],
            "x_prenorm": x,
        }

    def forward(self, x):
        if x.dim() != 4 or tuple(x.shape[-2:]) != self.patch_embed.img_size:
            raise ValueError(f"expected images [B, C, {self.patch_embed.img_size[0]}, {self.patch_embed.img_size[1]}], got {tuple(x.shape)}")
        ret = self.forward_features(x)
        return self.head(ret["x_norm_clstoken"])


class Encoder(nn.Module):
    """The blocks and the final norm over a token sequence (DinoVisionTransformer without the
    embeddings and the head)."""

    def __init__(self, dim, depth, num_heads, mlp_ratio):
        super().__init__()
        norm_layer = partial(nn.LayerNorm, eps=1e-6)  # as DinoVisionTransformer
        self.blocks = nn.ModuleList([
            Block(dim=dim, num_heads=num_heads, mlp_ratio=mlp_ratio, qkv_bias=True, norm_layer=norm_layer)
            for _ in range(depth)
        ])
        self.norm = norm_layer(dim)

    def forward(self, x, attn_bias=None):
        for blk in self.blocks:
            x = blk(x, attn_bias)
        return self.norm(x)


# ---- the adapter --------------------------------------------------------------------------
from tck.adapters import Chunk, ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def _block_map(prefix, target):
    out = {}
    for p in ("weight", "bias"):
        for i, n in enumerate("qkv"):
            out[f"{prefix}self_attn.{n}.{p}"] = Chunk(f"{target}attn.qkv.{p}", i, 3)
        out[f"{prefix}self_attn.o.{p}"] = f"{target}attn.proj.{p}"
        out[f"{prefix}norm1.{p}"] = f"{target}norm1.{p}"
        out[f"{prefix}norm2.{p}"] = f"{target}norm2.{p}"
        out[f"{prefix}ffn.fc1.{p}"] = f"{target}mlp.fc1.{p}"
        out[f"{prefix}ffn.fc2.{p}"] = f"{target}mlp.fc2.{p}"
    return out


def _encoder_map(config, prefix="", target=""):
    out = {}
    for i in range(config.n_layers):
        out |= _block_map(f"{prefix}layers.{i}.", f"{target}blocks.{i}.")
    out[f"{prefix}norm.weight"] = f"{target}norm.weight"
    out[f"{prefix}norm.bias"] = f"{target}norm.bias"
    return out


def _vit_map(config):
    out = {"patch_embed.weight": "patch_embed.proj.weight", "patch_embed.bias": "patch_embed.proj.bias"}
    out |= {"cls_token": "cls_token", "pos_embed": "pos_embed", "head.weight": "head.weight", "head.bias": "head.bias"}
    for i in range(config.n_layers):
        out |= _block_map(f"encoder.layers.{i}.", f"blocks.{i}.")
    out["encoder.norm.weight"] = "norm.weight"
    out["encoder.norm.bias"] = "norm.bias"
    return out


def _bias(x, key_padding, causal):
    kp = None if key_padding is None else torch.as_tensor(key_padding, dtype=torch.bool)
    return build_attn_bias(kp, bool(causal), x.shape[1], x.dtype)


def _seq_forward(module, x, key_padding=None, causal=False):
    return module(x, _bias(x, key_padding, causal))


def _vit(config):
    return DinoVisionTransformer(
        img_size=config.image_size, patch_size=config.patch_size, in_chans=config.channels, embed_dim=config.d_model,
        depth=config.n_layers, num_heads=config.n_heads, mlp_ratio=config.d_ff / config.d_model,
        num_classes=config.n_classes,
    )


DINO = Conventions(norm_placement="pre", activation="gelu", eps=1e-6, fully_masked_rows="uniform")
SPACE = ConfigSpace(split_heads=True, biases={"attention": True, "ffn": True, "norm": True, "head": True})

adapter = TorchModuleAdapter("dinov2-vit", [
    TorchEntry(
        "patch_embed",
        make=lambda config: PatchEmbed(config.image_size, config.patch_size, config.channels, config.d_model),
        forward=lambda m, images: m(images),
        param_map={"weight": "proj.weight", "bias": "proj.bias"},
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: Block(config.d_model, config.n_heads, mlp_ratio=config.d_ff / config.d_model, qkv_bias=True,
                                  norm_layer=partial(nn.LayerNorm, eps=1e-6)),
        forward=_seq_forward,
        param_map=_block_map("", ""),
        conventions=DINO,
        supports=SPACE,
    ),
    TorchEntry(
        "encoder",
        make=lambda config: Encoder(config.d_model, config.n_layers, config.n_heads, config.d_ff / config.d_model),
        forward=_seq_forward,
        param_map=_encoder_map,
        conventions=DINO,
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
