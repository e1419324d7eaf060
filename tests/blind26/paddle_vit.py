# fmt: off
# ruff: noqa
"""PaddleClas' ViT (``ppcls/arch/backbone/model_zoo/vision_transformer.py``) ported to torch for
the twenty-sixth blind set, keeping Paddle's names, idioms and layouts: ``nn.Linear`` weights
stored ``[in, out]`` and applied as ``x.matmul(weight) + bias`` (Paddle's ``F.linear``), the
fused ``qkv`` reshaped ``(-1, N, 3, num_heads, C // num_heads)`` and transposed
``(2, 0, 3, 1, 4)``, ``q.matmul(k.transpose((0, 1, 3, 2))) * self.scale``, ``softmax(axis=-1)``,
``attn.matmul(v).transpose((0, 2, 1, 3)).reshape((-1, N, C))``, ``Block`` (pre-LN with
``epsilon``), ``DropPath``/``Identity``, ``PatchEmbed`` (``Conv2D`` then
``flatten(2).transpose((0, 2, 1))``), ``cls_token.expand((B, -1, -1))``, ``paddle.concat``,
``x + self.pos_embed``, ``forward_features`` returning ``x[:, 0]`` after ``self.norm``.
Paddle's tensor methods are written through the small shims below (``transpose`` with a
permutation is ``permute``; ``concat`` is ``cat``).
"""

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


# ---- Paddle shims (the port's own) -----------------------------------------------------------

def paddle_transpose(x, perm):
    # paddle.transpose(x, perm) permutes every axis (torch.transpose swaps two)
    return x.permute(*perm)


def paddle_concat(xs, axis=0):
    return torch.cat(xs, dim=axis)


def trunc_normal_(tensor, std=0.02):
    return nn.init.trunc_normal_(tensor, std=std, a=-2 * std, b=2 * std)


def zeros_(tensor):
    return nn.init.zeros_(tensor)


def ones_(tensor):
    return nn.init.ones_(tensor)


def _at_least_float32(dtype):
    # the softmax is formed in float32 or better (Paddle forms it in the input dtype)
    return torch.float64 if dtype == torch.float64 else torch.float32


class Linear(nn.Module):
    """paddle.nn.Linear: weight [in_features, out_features], y = x W + b."""

    def __init__(self, in_features, out_features, bias_attr=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        nn.init.xavier_uniform_(self.weight)  # Paddle's default weight initializer
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias_attr is not False else None

    def forward(self, x):
        out = x.matmul(self.weight)
        if self.bias is not None:
            out = out + self.bias
        return out


class LayerNorm(nn.LayerNorm):
    """paddle.nn.LayerNorm(normalized_shape, epsilon=1e-05)."""

    def __init__(self, normalized_shape, epsilon=1e-05):
        super().__init__(normalized_shape, eps=epsilon)


class Conv2D(nn.Conv2d):
    pass


# ---- ppcls/arch/backbone/model_zoo/vision_transformer.py -------------------------------------

def to_2tuple(x):
    return tuple([x] * 2)


def drop_path(x, drop_prob=0., training=False):
    """Drop paths (Stochastic Depth) per sample (when applied in main path of residual blocks).
    the original name is misleading as 'Drop Connect' is a different form of dropout in a separate paper...
    See discussion: https://github.com/tensorflow/tpu/issues/494#issuecomment-532968956 ...
    """
    if drop_prob == 0. or not training:
        return x
    keep_prob = torch.tensor(1 - drop_prob, dtype=x.dtype)
    shape = (x.shape[0], ) + (1, ) * (x.ndim - 1)
    random_tensor = keep_prob + torch.rand(shape, dtype=x.dtype)
    random_tensor = torch.floor(random_tensor)  # binarize
    output = x.divide(keep_prob) * random_tensor
    return output


class DropPath(nn.Module):
    """Drop paths (Stochastic Depth) per sample  (when applied in main path of residual blocks).
    """

    def __init__(self, drop_prob=None):
        super(DropPath, self).__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)


class Identity(nn.Module):
    def __init__(self):
        super(Identity, self).__init__()

    def forward(self, input):
        return input


class Mlp(nn.Module):
    def __init__(self,
                 in_features,
                 hidden_features=None,
                 out_features=None,
                 act_layer=nn.GELU,
                 drop=0.):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = Linear(in_features, hidden_features)
        self.act = act_layer()
        self.fc2 = Linear(hidden_features, out_features)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop(x)  # after the activation
        x = self.fc2(x)
        x = self.drop(x)  # after fc2
        return x


class Attention(nn.Module):
    def __init__(self,
                 dim,
                 num_heads=8,
                 qkv_bias=False,
                 qk_scale=None,
                 attn_drop=0.,
                 proj_drop=0.):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = qk_scale or head_dim**-0.5

        self.qkv = Linear(dim, dim * 3, bias_attr=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x, attn_mask=None):
        # B= paddle.shape(x)[0]
        N, C = x.shape[1:]
        qkv = paddle_transpose(self.qkv(x).reshape((-1, N, 3, self.num_heads, C // self.num_heads)), (2, 0, 3, 1, 4))
        q, k, v = qkv[0], qkv[1], qkv[2]

        attn = (q.matmul(paddle_transpose(k, (0, 1, 3, 2)))) * self.scale
        if attn_mask is not None:
            attn = attn + attn_mask
        attn = F.softmax(attn.to(_at_least_float32(attn.dtype)), dim=-1).to(v.dtype)
        attn = self.attn_drop(attn)

        x = paddle_transpose(attn.matmul(v), (0, 2, 1, 3)).reshape((-1, N, C))
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class Block(nn.Module):
    def __init__(self,
                 dim,
                 num_heads,
                 mlp_ratio=4.,
                 qkv_bias=False,
                 qk_scale=None,
                 drop=0.,
                 attn_drop=0.,
                 drop_path=0.,
                 act_layer=nn.GELU,
                 norm_layer='LayerNorm',
                 epsilon=1e-5):
        super().__init__()
        if isinstance(norm_layer, str):
            self.norm1 = eval(norm_layer)(dim, epsilon=epsilon)
        elif isinstance(norm_layer, Callable):
            self.norm1 = norm_layer(dim)
        else:
            raise TypeError(
                "The norm_layer must be str or paddle.nn.layer.Layer class")
        self.attn = Attention(
            dim,
            num_heads=num_heads,
            qkv_bias=qkv_bias,
            qk_scale=qk_scale,
            attn_drop=attn_drop,
            proj_drop=drop)
        # NOTE: drop path for stochastic depth, we shall see if this is better than dropout here
        self.drop_path = DropPath(drop_path) if drop_path > 0. else Identity()
        if isinstance(norm_layer, str):
            self.norm2 = eval(norm_layer)(dim, epsilon=epsilon)
        elif isinstance(norm_layer, Callable):
            self.norm2 = norm_layer(dim)
        else:
            raise TypeError(
                "The norm_layer must be str or paddle.nn.layer.Layer class")
        mlp_hidden_dim = int(dim * mlp_ratio)
        self.mlp = Mlp(in_features=dim,
                       hidden_features=mlp_hidden_dim,
                       act_layer=act_layer,
                       drop=drop)

    def forward(self, x, attn_mask=None):
        x = x + self.drop_path(self.attn(self.norm1(x), attn_mask))
        x = x + self.drop_path(self.mlp(self.norm2(x)))
        return x


class PatchEmbed(nn.Module):
    """ Image to Patch Embedding
    """

    def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=768):
        super().__init__()
        img_size = to_2tuple(img_size)
        patch_size = to_2tuple(patch_size)
        num_patches = (img_size[1] // patch_size[1]) * \
            (img_size[0] // patch_size[0])
        self.img_size = img_size
        self.patch_size = patch_size
        self.num_patches = num_patches

        self.proj = Conv2D(
            in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        B, C, H, W = x.shape
        assert H == self.img_size[0] and W == self.img_size[1], \
            f"Input image size ({H}*{W}) doesn't match model ({self.img_size[0]}*{self.img_size[1]})."

        x = paddle_transpose(self.proj(x).flatten(2), (0, 2, 1))
        return x


class VisionTransformer(nn.Module):
    """ Vision Transformer with support for patch input
    """

    def __init__(self,
                 img_size=224,
                 patch_size=16,
                 in_chans=3,
                 class_num=1000,
                 embed_dim=768,
                 depth=12,
                 num_heads=12,
                 mlp_ratio=4,
                 qkv_bias=False,
                 qk_scale=None,
                 drop_rate=0.,
                 attn_drop_rate=0.,
                 drop_path_rate=0.,
                 norm_layer='LayerNorm',
                 epsilon=1e-5,
                 **kwargs):
        super().__init__()
        self.class_num = class_num

        self.num_features = self.embed_dim = embed_dim

        self.patch_embed = PatchEmbed(
            img_size=img_size,
            patch_size=patch_size,
            in_chans=in_chans,
            embed_dim=embed_dim)
        num_patches = self.patch_embed.num_patches

        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embed_dim))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_drop = nn.Dropout(p=drop_rate)

        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]

        self.blocks = nn.ModuleList([
            Block(
                dim=embed_dim,
                num_heads=num_heads,
                mlp_ratio=mlp_ratio,
                qkv_bias=qkv_bias,
                qk_scale=qk_scale,
                drop=drop_rate,
                attn_drop=attn_drop_rate,
                drop_path=dpr[i],
                norm_layer=norm_layer,
                epsilon=epsilon) for i in range(depth)
        ])

        self.norm = eval(norm_layer)(embed_dim, epsilon=epsilon)

        # Classifier head
        self.head = Linear(embed_dim,
                           class_num) if class_num > 0 else Identity()

        trunc_normal_(self.pos_embed)
        trunc_normal_(self.cls_token)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, Linear):
            trunc_normal_(m.weight)
            if isinstance(m, Linear) and m.bias is not None:
                zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            zeros_(m.bias)
            ones_(m.weight)

    def forward_features(self, x):
        # B = x.shape[0]
        B = x.shape[0]
        x = self.patch_embed(x)
        cls_tokens = self.cls_token.expand((B, -1, -1))
        x = paddle_concat((cls_tokens, x), axis=1)
        x = x + self.pos_embed
        x = self.pos_drop(x)
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        return x[:, 0]

    def forward(self, x):
        x = self.forward_features(x)
        x = self.head(x)
        return x


# ---- the adapter (glue: not PaddleClas' code) ---------------------------------------------

from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter, Times  # noqa: E402
from tck.reference import Conventions  # noqa: E402


class BlocksAndNorm(nn.Module):
    """The ``encoder`` subject: ``VisionTransformer``'s blocks and final norm, with a mask."""

    def __init__(self, config):
        super().__init__()
        vit = _vit(config)
        self.blocks = vit.blocks
        self.norm = vit.norm

    def forward(self, x, attn_mask=None):
        for blk in self.blocks:  # as forward_features does
            x = blk(x, attn_mask)
        return self.norm(x)


def _vit(config):
    return VisionTransformer(
        img_size=config.image_size, patch_size=config.patch_size, in_chans=config.channels,
        class_num=config.n_classes, embed_dim=config.d_model, depth=config.n_layers,
        num_heads=config.n_heads, mlp_ratio=config.d_ff // config.d_model, qkv_bias=True, epsilon=1e-6,
    )


def _block(config):
    return Block(dim=config.d_model, num_heads=config.n_heads, mlp_ratio=config.d_ff // config.d_model,
                 qkv_bias=True, epsilon=1e-6)


def _additive(x, key_padding=None, attn_mask=None, causal=False):
    """One additive [B, 1, L, L] mask from the kit's keep-masks (False: the dtype's minimum)."""
    length = x.shape[1]
    keep = torch.ones((x.shape[0], 1, length, length), dtype=torch.bool)
    if key_padding is not None:
        keep = keep & torch.as_tensor(key_padding).to(torch.bool)[:, None, None, :]
    if causal is not None and bool(causal):
        keep = keep & torch.ones((length, length), dtype=torch.bool).tril()
    if attn_mask is not None:
        keep = keep & torch.as_tensor(attn_mask).to(torch.bool)
    if bool(keep.all()):
        return None
    return torch.zeros(keep.shape, dtype=x.dtype).masked_fill(~keep, torch.finfo(x.dtype).min)


def _block_map(prefix, ours, config):
    d = config.d_model
    out = {}
    for i, c in enumerate("qkv"):
        out[f"{prefix}self_attn.{c}.weight"] = Param(f"{ours}attn.qkv.weight", slice=(1, i * d, (i + 1) * d), permute=(1, 0))
        out[f"{prefix}self_attn.{c}.bias"] = Param(f"{ours}attn.qkv.bias", slice=(0, i * d, (i + 1) * d))
    out[f"{prefix}self_attn.o.weight"] = Param(f"{ours}attn.proj.weight", permute=(1, 0))
    out[f"{prefix}self_attn.o.bias"] = f"{ours}attn.proj.bias"
    out[f"{prefix}ffn.fc1.weight"] = Param(f"{ours}mlp.fc1.weight", permute=(1, 0))
    out[f"{prefix}ffn.fc1.bias"] = f"{ours}mlp.fc1.bias"
    out[f"{prefix}ffn.fc2.weight"] = Param(f"{ours}mlp.fc2.weight", permute=(1, 0))
    out[f"{prefix}ffn.fc2.bias"] = f"{ours}mlp.fc2.bias"
    for n in ("norm1", "norm2"):
        out[f"{prefix}{n}.weight"] = f"{ours}{n}.weight"
        out[f"{prefix}{n}.bias"] = f"{ours}{n}.bias"
    return out


def _encoder_map(config, prefix="", ours=""):
    out = {}
    for i in range(config.n_layers):
        out |= _block_map(f"{prefix}layers.{i}.", f"{ours}blocks.{i}.", config)
    out[f"{prefix}norm.weight"] = f"{ours}norm.weight"
    out[f"{prefix}norm.bias"] = f"{ours}norm.bias"
    return out


def _vit_map(config):
    out = {"patch_embed.weight": "patch_embed.proj.weight", "patch_embed.bias": "patch_embed.proj.bias",
           "cls_token": "cls_token", "pos_embed": "pos_embed",
           "head.weight": Param("head.weight", permute=(1, 0)), "head.bias": "head.bias"}
    return out | _encoder_map(config, "encoder.", "")


_VIT = dict(norm_placement="pre", activation="gelu", eps=1e-6)
_SPACE = ConfigSpace(split_heads=True, relations={"d_ff": Times("d_model", 4)})

adapter = TorchModuleAdapter("paddle-vit", [
    TorchEntry("patch_embed",
               make=lambda config: PatchEmbed(config.image_size, config.patch_size, config.channels, config.d_model),
               forward=lambda pe, images: pe(images),
               param_map={"weight": "proj.weight", "bias": "proj.bias"},
               conventions=Conventions(**_VIT)),
    TorchEntry("encoder_layer", make=_block,
               forward=lambda blk, x, key_padding=None, attn_mask=None, causal=False: blk(x, _additive(x, key_padding, attn_mask, causal)),
               param_map=lambda config: _block_map("", "", config),
               conventions=Conventions(**_VIT, fully_masked_rows="uniform"), supports=_SPACE),
    TorchEntry("encoder", make=BlocksAndNorm,
               forward=lambda enc, x, key_padding=None, attn_mask=None, causal=False: enc(x, _additive(x, key_padding, attn_mask, causal)),
               param_map=_encoder_map,
               conventions=Conventions(**_VIT, fully_masked_rows="uniform"), supports=_SPACE),
    TorchEntry("vit", make=_vit, forward=lambda vit, images: vit(images), param_map=_vit_map,
               conventions=Conventions(**_VIT), supports=_SPACE),
])
