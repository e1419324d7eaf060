# fmt: off
# ruff: noqa
"""facebookresearch/dino (v1) vision_transformer.py and the linear classifier of eval_linear.py,
written the way the DINO repository writes them: drop_path, DropPath, Mlp, Attention returning
(x, attn), Block with return_attention, PatchEmbed, VisionTransformer with prepare_tokens and
interpolate_pos_encoding, get_intermediate_layers, trunc_normal_ init, LinearClassifier on the
concatenated class tokens of the last blocks. Written from memory for the 28th blind set."""
# Copyright (c) Facebook, Inc. and its affiliates.
#
# Licensed under the Apache License, Version 2.0 (the "License");
"""
Mostly copy-paste from timm library.
https://github.com/rwightman/pytorch-image-models/blob/master/timm/models/vision_transformer.py
"""
import math
from functools import partial

import torch
import torch.nn as nn


def _no_grad_trunc_normal_(tensor, mean, std, a, b):
    # Cut & paste from PyTorch official master until it's in a few official releases - RW
    # Method based on https://people.sc.fsu.edu/~jburkardt/presentations/truncated_normal.pdf
    def norm_cdf(x):
        # Computes standard normal cumulative distribution function
        return (1. + math.erf(x / math.sqrt(2.))) / 2.

    with torch.no_grad():
        l = norm_cdf((a - mean) / std)
        u = norm_cdf((b - mean) / std)
        tensor.uniform_(2 * l - 1, 2 * u - 1)
        tensor.erfinv_()
        tensor.mul_(std * math.sqrt(2.))
        tensor.add_(mean)
        tensor.clamp_(min=a, max=b)
        return tensor


def trunc_normal_(tensor, mean=0., std=1., a=-2., b=2.):
    # type: (Tensor, float, float, float, float) -> Tensor
    return _no_grad_trunc_normal_(tensor, mean, std, a, b)


def drop_path(x, drop_prob: float = 0., training: bool = False):
    if drop_prob == 0. or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # work with diff dim tensors, not just 2D ConvNets
    random_tensor = keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)
    random_tensor.floor_()  # binarize
    output = x.div(keep_prob) * random_tensor
    return output


class DropPath(nn.Module):
    """Drop paths (Stochastic Depth) per sample  (when applied in main path of residual blocks).
    """
    def __init__(self, drop_prob=None):
        super(DropPath, self).__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU, drop=0.):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.fc2 = nn.Linear(hidden_features, out_features)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop(x)
        x = self.fc2(x)
        x = self.drop(x)
        return x


class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False, qk_scale=None, attn_drop=0., proj_drop=0.):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = qk_scale or head_dim ** -0.5

        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x, attn_mask=None):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]

        attn = (q @ k.transpose(-2, -1)) * self.scale
        if attn_mask is not None:  # not in DINO: an optional keep-mask (B, 1 or heads, N, N), as later timm takes one
            attn = attn.masked_fill(~attn_mask, torch.finfo(attn.dtype).min)
        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)

        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x, attn


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4., qkv_bias=False, qk_scale=None, drop=0., attn_drop=0.,
                 drop_path=0., act_layer=nn.GELU, norm_layer=nn.LayerNorm):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = Attention(
            dim, num_heads=num_heads, qkv_bias=qkv_bias, qk_scale=qk_scale, attn_drop=attn_drop, proj_drop=drop)
        self.drop_path = DropPath(drop_path) if drop_path > 0. else nn.Identity()
        self.norm2 = norm_layer(dim)
        mlp_hidden_dim = int(dim * mlp_ratio)
        self.mlp = Mlp(in_features=dim, hidden_features=mlp_hidden_dim, act_layer=act_layer, drop=drop)

    def forward(self, x, return_attention=False, attn_mask=None):
        y, attn = self.attn(self.norm1(x), attn_mask=attn_mask)
        if return_attention:
            return attn
        x = x + self.drop_path(y)
        x = x + self.drop_path(self.mlp(self.norm2(x)))
        return x


class PatchEmbed(nn.Module):
    """ Image to Patch Embedding
    """
    def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=768):
        super().__init__()
        num_patches = (img_size // patch_size) * (img_size // patch_size)
        self.img_size = img_size
        self.patch_size = patch_size
        self.num_patches = num_patches

        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        B, C, H, W = x.shape
        # not in DINO (which interpolates the position table instead): a wrong image size is refused, as timm does
        assert H == self.img_size and W == self.img_size, f"Input image size ({H}*{W}) doesn't match model ({self.img_size}*{self.img_size})."
        x = self.proj(x).flatten(2).transpose(1, 2)
        return x


class VisionTransformer(nn.Module):
    """ Vision Transformer """
    def __init__(self, img_size=[224], patch_size=16, in_chans=3, num_classes=0, embed_dim=768, depth=12,
                 num_heads=12, mlp_ratio=4., qkv_bias=False, qk_scale=None, drop_rate=0., attn_drop_rate=0.,
                 drop_path_rate=0., norm_layer=nn.LayerNorm, **kwargs):
        super().__init__()
        self.num_features = self.embed_dim = embed_dim

        self.patch_embed = PatchEmbed(
            img_size=img_size[0], patch_size=patch_size, in_chans=in_chans, embed_dim=embed_dim)
        num_patches = self.patch_embed.num_patches

        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embed_dim))
        self.pos_drop = nn.Dropout(p=drop_rate)

        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]  # stochastic depth decay rule
        self.blocks = nn.ModuleList([
            Block(
                dim=embed_dim, num_heads=num_heads, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, qk_scale=qk_scale,
                drop=drop_rate, attn_drop=attn_drop_rate, drop_path=dpr[i], norm_layer=norm_layer)
            for i in range(depth)])
        self.norm = norm_layer(embed_dim)

        # Classifier head
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()

        trunc_normal_(self.pos_embed, std=.02)
        trunc_normal_(self.cls_token, std=.02)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            trunc_normal_(m.weight, std=.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    def interpolate_pos_encoding(self, x, w, h):
        npatch = x.shape[1] - 1
        N = self.pos_embed.shape[1] - 1
        if npatch == N and w == h:
            return self.pos_embed
        class_pos_embed = self.pos_embed[:, 0]
        patch_pos_embed = self.pos_embed[:, 1:]
        dim = x.shape[-1]
        w0 = w // self.patch_embed.patch_size
        h0 = h // self.patch_embed.patch_size
        # we add a small number to avoid floating point error in the interpolation
        # see discussion at https://github.com/facebookresearch/dino/issues/8
        w0, h0 = w0 + 0.1, h0 + 0.1
        patch_pos_embed = nn.functional.interpolate(
            patch_pos_embed.reshape(1, int(math.sqrt(N)), int(math.sqrt(N)), dim).permute(0, 3, 1, 2),
            scale_factor=(w0 / math.sqrt(N), h0 / math.sqrt(N)),
            mode='bicubic',
        )
        assert int(w0) == patch_pos_embed.shape[-2] and int(h0) == patch_pos_embed.shape[-1]
        patch_pos_embed = patch_pos_embed.permute(0, 2, 3, 1).view(1, -1, dim)
        return torch.cat((class_pos_embed.unsqueeze(0), patch_pos_embed), dim=1)

    def prepare_tokens(self, x):
        B, nc, w, h = x.shape
        x = self.patch_embed(x)  # patch linear embedding

        # add the [CLS] token to the embed patch tokens
        cls_tokens = self.cls_token.expand(B, -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)

        # add positional encoding to each token
        x = x + self.interpolate_pos_encoding(x, w, h)

        return self.pos_drop(x)

    def forward(self, x):
        x = self.prepare_tokens(x)
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        return x[:, 0]

    def get_last_selfattention(self, x):
        x = self.prepare_tokens(x)
        for i, blk in enumerate(self.blocks):
            if i < len(self.blocks) - 1:
                x = blk(x)
            else:
                # return attention of the last block
                return blk(x, return_attention=True)

    def get_intermediate_layers(self, x, n=1):
        x = self.prepare_tokens(x)
        # we return the output tokens from the `n` last blocks
        output = []
        for i, blk in enumerate(self.blocks):
            x = blk(x)
            if len(self.blocks) - i <= n:
                output.append(self.norm(x))
        return output


class LinearClassifier(nn.Module):
    """Linear layer to train on top of frozen features"""
    def __init__(self, dim, num_labels=1000):
        super(LinearClassifier, self).__init__()
        self.num_labels = num_labels
        self.linear = nn.Linear(dim, num_labels)
        self.linear.weight.data.normal_(mean=0.0, std=0.01)
        self.linear.bias.data.zero_()

    def forward(self, x):
        # flatten
        x = x.view(x.size(0), -1)

        # linear layer
        return self.linear(x)


class DinoLinearEval(nn.Module):
    """eval_linear.py's forward pass: frozen backbone features, then the linear classifier."""
    def __init__(self, model, linear_classifier, n_last_blocks=1, avgpool_patchtokens=False):
        super().__init__()
        self.model = model
        self.linear_classifier = linear_classifier
        self.n_last_blocks = n_last_blocks
        self.avgpool_patchtokens = avgpool_patchtokens

    def forward(self, inp):
        # forward (eval_linear.py runs the backbone under torch.no_grad(); left out so gradients reach it)
        intermediate_output = self.model.get_intermediate_layers(inp, self.n_last_blocks)
        output = torch.cat([x[:, 0] for x in intermediate_output], dim=-1)
        if self.avgpool_patchtokens:
            output = torch.cat((output.unsqueeze(-1), torch.mean(intermediate_output[-1][:, 1:], dim=1).unsqueeze(-1)), dim=-1)
            output = output.reshape(output.shape[0], -1)
        output = self.linear_classifier(output)
        return output


def vit_tiny(patch_size=16, **kwargs):
    model = VisionTransformer(
        patch_size=patch_size, embed_dim=192, depth=12, num_heads=3, mlp_ratio=4,
        qkv_bias=True, norm_layer=partial(nn.LayerNorm, eps=1e-6), **kwargs)
    return model


# ---------------------------------------------------------------- adapter (glue, not DINO)
from tck.adapters import Chunk, ConfigSpace, TorchEntry, TorchModuleAdapter, Times  # noqa: E402
from tck.reference import Conventions  # noqa: E402


def _block_map(ours, theirs):
    m = {}
    for p in ("weight", "bias"):
        m |= {f"{ours}self_attn.{n}.{p}": Chunk(f"{theirs}attn.qkv.{p}", i, 3) for i, n in enumerate("qkv")}
        m |= {f"{ours}self_attn.o.{p}": f"{theirs}attn.proj.{p}", f"{ours}norm1.{p}": f"{theirs}norm1.{p}",
              f"{ours}norm2.{p}": f"{theirs}norm2.{p}", f"{ours}ffn.fc1.{p}": f"{theirs}mlp.fc1.{p}",
              f"{ours}ffn.fc2.{p}": f"{theirs}mlp.fc2.{p}"}
    return m


def _vit_map(config):
    m = {"patch_embed.weight": "model.patch_embed.proj.weight", "patch_embed.bias": "model.patch_embed.proj.bias",
         "cls_token": "model.cls_token", "pos_embed": "model.pos_embed",
         "encoder.norm.weight": "model.norm.weight", "encoder.norm.bias": "model.norm.bias",
         "head.weight": "linear_classifier.linear.weight", "head.bias": "linear_classifier.linear.bias"}
    for i in range(config.n_layers):
        m |= _block_map(f"encoder.layers.{i}.", f"model.blocks.{i}.")
    return m


def _vit(config):
    backbone = VisionTransformer(
        img_size=[config.image_size], patch_size=config.patch_size, in_chans=config.channels, embed_dim=config.d_model,
        depth=config.n_layers, num_heads=config.n_heads, mlp_ratio=4, qkv_bias=True,
        norm_layer=partial(nn.LayerNorm, eps=1e-6), drop_rate=0.1, attn_drop_rate=0.1, drop_path_rate=0.1)
    return DinoLinearEval(backbone, LinearClassifier(backbone.embed_dim * 1, num_labels=config.n_classes), n_last_blocks=1)


VIT = Conventions(norm_placement="pre", activation="gelu", eps=1e-6)
VIT_MASKED = Conventions(norm_placement="pre", activation="gelu", eps=1e-6, fully_masked_rows="uniform")


def _keep(x, key_padding=None, attn_mask=None, causal=None):
    """The kit's keep-masks as one boolean (B, 1, N, N) mask; None when nothing is masked."""
    B, N = x.shape[0], x.shape[1]
    if key_padding is None and attn_mask is None and not causal:
        return None
    keep = torch.ones(B, 1, N, N, dtype=torch.bool)
    if key_padding is not None:
        keep = keep & torch.as_tensor(key_padding).bool()[:, None, None, :]
    if attn_mask is not None:
        m = torch.as_tensor(attn_mask).bool()
        keep = keep & (m[:, None] if m.dim() == 3 else m[None, None])
    if causal:
        keep = keep & torch.ones(N, N, dtype=torch.bool).tril()[None, None]
    return keep

adapter = TorchModuleAdapter("dino-v1-vit", [
    TorchEntry("patch_embed", make=lambda config: PatchEmbed(config.image_size, config.patch_size, config.channels, config.d_model),
               forward=lambda m, images: m(images), param_map={"weight": "proj.weight", "bias": "proj.bias"}, conventions=VIT),
    TorchEntry("encoder_layer",
               make=lambda config: Block(config.d_model, config.n_heads, mlp_ratio=config.d_ff / config.d_model, qkv_bias=True,
                                         drop=0.1, attn_drop=0.1, drop_path=0.1, norm_layer=partial(nn.LayerNorm, eps=1e-6)),
               forward=lambda m, x, key_padding=None, attn_mask=None, causal=None: m(x, attn_mask=_keep(x, key_padding, attn_mask, causal)),
               param_map=_block_map("", ""), conventions=VIT_MASKED, supports=ConfigSpace(split_heads=True)),
    TorchEntry("vit", make=_vit, forward=lambda m, images: m(images), param_map=_vit_map, conventions=VIT,
               supports=ConfigSpace(split_heads=True, relations={"d_ff": Times("d_model", 4)})),
])
