# fmt: off
# ruff: noqa
"""The ViT of OpenMMLab's mmpretrain (``mmpretrain/models/backbones/vision_transformer.py``) in
its own style, without mmcv / mmengine: config dicts (``arch_zoo`` / ``arch_settings``,
``norm_cfg=dict(type='LN', eps=1e-6)``, ``act_cfg=dict(type='GELU')``, ``layer_cfgs``,
``patch_cfg``), registry-like builders (``build_norm_layer``, ``build_activation_layer``,
``build_dropout``), ``PatchEmbed`` as a ``Conv2d`` with kernel = stride = patch size whose
output is ``flatten(2).transpose(1, 2)``, ``TransformerEncoderLayer`` with ``ln1`` / ``attn`` /
``ln2`` / ``ffn`` (``x = x + attn(ln1(x))``, ``x = ffn(ln2(x), identity=x)``), mmpretrain's
``MultiheadAttention`` with ONE ``qkv`` linear reshaped to ``(B, N, 3, heads, head_dims)`` and
permuted ``(2, 0, 3, 1, 4)``, the attention of ``scaled_dot_product_attention_pyimpl``, a
``proj``; mmcv's ``FFN`` whose ``layers`` are ``Sequential(Sequential(Linear, GELU, Dropout),
Linear, Dropout)`` with the identity added; ``with_cls_token=True``, ``pos_embed`` added after
the class token, ``final_norm=True`` (``ln1`` after the last layer, every token),
``out_type='cls_token'``, then ``VisionTransformerClsHead`` (``layers.head``, a Linear).
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn


# ---- registry-like builders (mmcv.cnn)

NORM_LAYERS = {"LN": nn.LayerNorm}
ACTIVATION_LAYERS = {"GELU": nn.GELU, "ReLU": nn.ReLU}


def build_norm_layer(cfg, num_features):
    cfg_ = copy.deepcopy(cfg)
    layer_type = cfg_.pop("type")
    requires_grad = cfg_.pop("requires_grad", True)
    cfg_.setdefault("eps", 1e-5)
    layer = NORM_LAYERS[layer_type](num_features, **cfg_)
    for param in layer.parameters():
        param.requires_grad = requires_grad
    return layer


def build_activation_layer(cfg):
    cfg_ = copy.deepcopy(cfg)
    return ACTIVATION_LAYERS[cfg_.pop("type")](**cfg_)


def build_dropout(cfg):
    cfg_ = copy.deepcopy(cfg)
    layer_type = cfg_.pop("type")
    drop_prob = cfg_.pop("drop_prob", 0.0)
    if layer_type == "DropPath":
        return DropPath(drop_prob)
    return nn.Dropout(drop_prob)


def drop_path(x, drop_prob=0.0, training=False):
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)
    return x.div(keep_prob) * random_tensor.floor()


class DropPath(nn.Module):
    def __init__(self, drop_prob=0.1):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)


def to_2tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x, x)


# ---- mmcv.cnn.bricks.transformer.PatchEmbed (conv projection, no adaptive padding)


class PatchEmbed(nn.Module):
    def __init__(self, in_channels=3, embed_dims=768, conv_type="Conv2d", kernel_size=16, stride=16,
                 padding=0, dilation=1, bias=True, norm_cfg=None, input_size=None):
        super().__init__()
        self.embed_dims = embed_dims
        kernel_size = to_2tuple(kernel_size)
        stride = to_2tuple(stride)
        self.kernel_size = kernel_size
        self.projection = nn.Conv2d(in_channels, embed_dims, kernel_size=kernel_size, stride=stride,
                                    padding=padding, dilation=dilation, bias=bias)
        self.norm = build_norm_layer(norm_cfg, embed_dims) if norm_cfg is not None else None
        if input_size:
            input_size = to_2tuple(input_size)
            h_out = (input_size[0] - dilation * (kernel_size[0] - 1) - 1) // stride[0] + 1
            w_out = (input_size[1] - dilation * (kernel_size[1] - 1) - 1) // stride[1] + 1
            self.init_out_size = (h_out, w_out)
        else:
            self.init_out_size = None

    def forward(self, x):
        if x.dim() != 4:
            raise ValueError(f"PatchEmbed takes [B, C, H, W] images, not {tuple(x.shape)}")
        if x.shape[2] % self.kernel_size[0] or x.shape[3] % self.kernel_size[1]:
            raise ValueError(f"image {tuple(x.shape[2:])} is not a multiple of the patch size {self.kernel_size}")
        x = self.projection(x)
        out_size = (x.shape[2], x.shape[3])
        x = x.flatten(2).transpose(1, 2)
        if self.norm is not None:
            x = self.norm(x)
        return x, out_size


# ---- mmpretrain.models.utils.attention


def scaled_dot_product_attention_pyimpl(query, key, value, attn_mask=None, dropout_p=0.0, scale=None, is_causal=False):
    scale = scale or query.size(-1) ** 0.5
    if is_causal and attn_mask is None:
        attn_mask = torch.ones(query.size(-2), key.size(-2), dtype=torch.bool).tril(diagonal=0)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype).masked_fill(~attn_mask, -float("inf"))
    attn_weight = query @ key.transpose(-2, -1) / scale
    if attn_mask is not None:
        attn_weight = attn_weight + attn_mask
    attn_weight = torch.softmax(attn_weight, dim=-1, dtype=torch.promote_types(attn_weight.dtype, torch.float32)).to(query.dtype)
    attn_weight = torch.dropout(attn_weight, dropout_p, True)
    return attn_weight @ value


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dims, num_heads, input_dims=None, attn_drop=0.0, proj_drop=0.0,
                 dropout_layer=dict(type="Dropout", drop_prob=0.0), qkv_bias=True, qk_scale=None,
                 proj_bias=True, v_shortcut=False):
        super().__init__()
        self.input_dims = input_dims or embed_dims
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.v_shortcut = v_shortcut
        self.head_dims = embed_dims // num_heads
        self.scaled_dot_product_attention = scaled_dot_product_attention_pyimpl
        self.qkv = nn.Linear(self.input_dims, embed_dims * 3, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(embed_dims, embed_dims, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop)
        self.out_drop = build_dropout(dropout_layer)

    def forward(self, x, attn_mask=None):
        B, N, _ = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dims).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn_drop = self.attn_drop if self.training else 0.0
        x = self.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=attn_drop)
        x = x.transpose(1, 2).reshape(B, N, self.embed_dims)
        x = self.proj(x)
        x = self.out_drop(self.proj_drop(x))
        if self.v_shortcut:
            x = v.squeeze(1) + x
        return x


# ---- mmcv.cnn.bricks.transformer.FFN


class FFN(nn.Module):
    def __init__(self, embed_dims=256, feedforward_channels=1024, num_fcs=2, act_cfg=dict(type="ReLU", inplace=True),
                 ffn_drop=0.0, dropout_layer=None, add_identity=True):
        super().__init__()
        self.embed_dims = embed_dims
        self.feedforward_channels = feedforward_channels
        self.num_fcs = num_fcs
        layers = []
        in_channels = embed_dims
        for _ in range(num_fcs - 1):
            layers.append(nn.Sequential(nn.Linear(in_channels, feedforward_channels), build_activation_layer(act_cfg), nn.Dropout(ffn_drop)))
            in_channels = feedforward_channels
        layers.append(nn.Linear(feedforward_channels, embed_dims))
        layers.append(nn.Dropout(ffn_drop))
        self.layers = nn.Sequential(*layers)
        self.dropout_layer = build_dropout(dropout_layer) if dropout_layer else nn.Identity()
        self.add_identity = add_identity

    def forward(self, x, identity=None):
        out = self.layers(x)
        if not self.add_identity:
            return self.dropout_layer(out)
        if identity is None:
            identity = x
        return identity + self.dropout_layer(out)


# ---- mmpretrain.models.backbones.vision_transformer


class TransformerEncoderLayer(nn.Module):
    def __init__(self, embed_dims, num_heads, feedforward_channels, drop_rate=0.0, attn_drop_rate=0.0,
                 drop_path_rate=0.0, num_fcs=2, qkv_bias=True, act_cfg=dict(type="GELU"), norm_cfg=dict(type="LN")):
        super().__init__()
        self.embed_dims = embed_dims
        self.ln1 = build_norm_layer(norm_cfg, self.embed_dims)
        self.attn = MultiheadAttention(embed_dims=embed_dims, num_heads=num_heads, attn_drop=attn_drop_rate, proj_drop=drop_rate,
                                       dropout_layer=dict(type="DropPath", drop_prob=drop_path_rate), qkv_bias=qkv_bias)
        self.ln2 = build_norm_layer(norm_cfg, self.embed_dims)
        self.ffn = FFN(embed_dims=embed_dims, feedforward_channels=feedforward_channels, num_fcs=num_fcs, ffn_drop=drop_rate,
                       dropout_layer=dict(type="DropPath", drop_prob=drop_path_rate), act_cfg=act_cfg)

    def forward(self, x, attn_mask=None):
        x = x + self.attn(self.ln1(x), attn_mask=attn_mask)
        x = self.ffn(self.ln2(x), identity=x)
        return x


def resize_pos_embed(pos_embed, src_shape, dst_shape, mode="bicubic", num_extra_tokens=1):
    """Resize pos_embed weights (only when the patch grid changed)."""
    if src_shape[0] == dst_shape[0] and src_shape[1] == dst_shape[1]:
        return pos_embed
    raise ValueError(f"patch grid {dst_shape} is not the model's {src_shape}: this port does not interpolate pos_embed")


class VisionTransformer(nn.Module):
    arch_zoo = {
        **dict.fromkeys(["s", "small"], {"embed_dims": 768, "num_layers": 8, "num_heads": 8, "feedforward_channels": 768 * 3}),
        **dict.fromkeys(["b", "base"], {"embed_dims": 768, "num_layers": 12, "num_heads": 12, "feedforward_channels": 3072}),
        **dict.fromkeys(["deit-t", "deit-tiny"], {"embed_dims": 192, "num_layers": 12, "num_heads": 3, "feedforward_channels": 192 * 4}),
    }
    num_extra_tokens = 1

    def __init__(self, arch="base", img_size=224, patch_size=16, in_channels=3, out_indices=-1, drop_rate=0.0,
                 drop_path_rate=0.0, qkv_bias=True, norm_cfg=dict(type="LN", eps=1e-6), final_norm=True,
                 out_type="cls_token", with_cls_token=True, interpolate_mode="bicubic", patch_cfg=dict(), layer_cfgs=dict()):
        super().__init__()
        if isinstance(arch, str):
            arch = arch.lower()
            self.arch_settings = self.arch_zoo[arch]
        else:
            self.arch_settings = arch
        self.embed_dims = self.arch_settings["embed_dims"]
        self.num_layers = self.arch_settings["num_layers"]
        self.img_size = to_2tuple(img_size)
        _patch_cfg = dict(in_channels=in_channels, input_size=img_size, embed_dims=self.embed_dims,
                          conv_type="Conv2d", kernel_size=patch_size, stride=patch_size)
        _patch_cfg.update(patch_cfg)
        self.patch_embed = PatchEmbed(**_patch_cfg)
        self.patch_resolution = self.patch_embed.init_out_size
        num_patches = self.patch_resolution[0] * self.patch_resolution[1]
        self.out_type = out_type
        if with_cls_token:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, self.embed_dims))
        else:
            self.cls_token = None
        self.interpolate_mode = interpolate_mode
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + self.num_extra_tokens, self.embed_dims))
        self.drop_after_pos = nn.Dropout(p=drop_rate)
        self.out_indices = [self.num_layers + i if i < 0 else i for i in ([out_indices] if isinstance(out_indices, int) else out_indices)]
        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, self.num_layers)]
        self.layers = nn.ModuleList()
        if isinstance(layer_cfgs, dict):
            layer_cfgs = [layer_cfgs] * self.num_layers
        for i in range(self.num_layers):
            _layer_cfg = dict(embed_dims=self.embed_dims, num_heads=self.arch_settings["num_heads"],
                              feedforward_channels=self.arch_settings["feedforward_channels"], drop_rate=drop_rate,
                              drop_path_rate=dpr[i], qkv_bias=qkv_bias, norm_cfg=norm_cfg)
            _layer_cfg.update(layer_cfgs[i])
            self.layers.append(TransformerEncoderLayer(**_layer_cfg))
        self.final_norm = final_norm
        if final_norm:
            self.ln1 = build_norm_layer(norm_cfg, self.embed_dims)

    def forward_layers(self, x, attn_mask=None):
        outs = []
        for i, layer in enumerate(self.layers):
            x = layer(x, attn_mask=attn_mask)
            if i == len(self.layers) - 1 and self.final_norm:
                x = self.ln1(x)
            if i in self.out_indices:
                outs.append(x)
        return outs

    def forward(self, x):
        B = x.shape[0]
        x, patch_resolution = self.patch_embed(x)
        if self.cls_token is not None:
            cls_token = self.cls_token.expand(B, -1, -1)
            x = torch.cat((cls_token, x), dim=1)
        x = x + resize_pos_embed(self.pos_embed, self.patch_resolution, patch_resolution, mode=self.interpolate_mode, num_extra_tokens=self.num_extra_tokens)
        x = self.drop_after_pos(x)
        return tuple(self._format_output(out, patch_resolution) for out in self.forward_layers(x))

    def _format_output(self, x, hw):
        if self.out_type == "raw":
            return x
        if self.out_type == "cls_token":
            return x[:, 0]
        patch_token = x[:, self.num_extra_tokens:]
        if self.out_type == "avg_featmap":
            return patch_token.mean(dim=1)
        raise ValueError(f"unsupported out_type {self.out_type}")


class VisionTransformerClsHead(nn.Module):
    def __init__(self, num_classes, in_channels, hidden_dim=None):
        super().__init__()
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.hidden_dim = hidden_dim
        if self.hidden_dim is None:
            layers = [("head", nn.Linear(self.in_channels, self.num_classes))]
        else:
            layers = [("pre_logits", nn.Linear(self.in_channels, self.hidden_dim)), ("act", nn.Tanh()),
                      ("head", nn.Linear(self.hidden_dim, self.num_classes))]
        self.layers = nn.Sequential(OrderedDict(layers))

    def pre_logits(self, feats):
        feat = feats[-1]
        if self.hidden_dim is None:
            return feat
        return self.layers.act(self.layers.pre_logits(feat))

    def forward(self, feats):
        pre_logits = self.pre_logits(feats)
        return self.layers.head(pre_logits)


class ImageClassifier(nn.Module):
    def __init__(self, backbone, head):
        super().__init__()
        self.backbone = VisionTransformer(**backbone)
        self.head = VisionTransformerClsHead(**head)

    def forward(self, inputs):
        feats = self.backbone(inputs)
        return self.head(feats)


# ---- the adapter

from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions

NORM_CFG = dict(type="LN", eps=1e-6)


def arch(config):
    return {"embed_dims": config.d_model, "num_layers": config.n_layers, "num_heads": config.n_heads,
            "feedforward_channels": config.d_ff}


def make_classifier(config):
    backbone = dict(arch=arch(config), img_size=config.image_size, patch_size=config.patch_size, in_channels=config.channels,
                    drop_rate=0.1, norm_cfg=NORM_CFG, final_norm=True, out_type="cls_token", with_cls_token=True)
    return ImageClassifier(backbone, dict(num_classes=config.n_classes, in_channels=config.d_model))


def make_backbone_layers(config):
    model = VisionTransformer(arch=arch(config), img_size=config.patch_size, patch_size=config.patch_size,
                              in_channels=config.channels, norm_cfg=NORM_CFG)
    del model.patch_embed, model.cls_token, model.pos_embed  # the encoder alone
    return model


def make_layer(config):
    return TransformerEncoderLayer(config.d_model, config.n_heads, config.d_ff, drop_rate=0.1, norm_cfg=NORM_CFG)


def make_patch_embed(config):
    return PatchEmbed(in_channels=config.channels, embed_dims=config.d_model, kernel_size=config.patch_size, stride=config.patch_size)


def attn_mask(x, key_padding=None, causal=False):
    """The boolean keep-mask [B, 1, L, L] (True = may attend) the layer's attention adds as 0 / -inf."""
    B, L = x.shape[0], x.shape[1]
    keep = torch.ones(B, 1, L, L, dtype=torch.bool)
    if key_padding is not None:
        keep = keep & torch.as_tensor(key_padding, dtype=torch.bool)[:, None, None, :]
    if causal:
        keep = keep & torch.ones(L, L, dtype=torch.bool).tril()
    return None if key_padding is None and not causal else keep


def forward_layer(layer, x, key_padding=None, causal=False):
    return layer(x, attn_mask=attn_mask(x, key_padding, bool(causal)))


def forward_encoder(model, x, key_padding=None, causal=False):
    return model.forward_layers(x, attn_mask=attn_mask(x, key_padding, bool(causal)))[-1]


def forward_patch_embed(module, images):
    return module(images)[0]


def layer_param_map(config, mine=""):
    """Canonical encoder-layer names -> this layer's (``mine`` prefixes the module names)."""
    D = config.d_model
    names = {}
    for p in ("weight", "bias"):
        for i, n in enumerate("qkv"):
            names[f"self_attn.{n}.{p}"] = Param(f"{mine}attn.qkv.{p}", slice=(0, i * D, (i + 1) * D))
        names[f"self_attn.o.{p}"] = f"{mine}attn.proj.{p}"
        names[f"norm1.{p}"] = f"{mine}ln1.{p}"
        names[f"norm2.{p}"] = f"{mine}ln2.{p}"
        names[f"ffn.fc1.{p}"] = f"{mine}ffn.layers.0.0.{p}"
        names[f"ffn.fc2.{p}"] = f"{mine}ffn.layers.1.{p}"
    return names


def encoder_map(config, prefix="", mine=""):
    names = {f"{prefix}norm.{p}": f"{mine}ln1.{p}" for p in ("weight", "bias")}
    for i in range(config.n_layers):
        names |= {f"{prefix}layers.{i}.{k}": v for k, v in layer_param_map(config, f"{mine}layers.{i}.").items()}
    return names


def vit_map(config):
    names = {"patch_embed.weight": "backbone.patch_embed.projection.weight", "patch_embed.bias": "backbone.patch_embed.projection.bias",
             "cls_token": "backbone.cls_token", "pos_embed": "backbone.pos_embed",
             "head.weight": "head.layers.head.weight", "head.bias": "head.layers.head.bias"}
    return names | encoder_map(config, "encoder.", "backbone.")


MASKED = Conventions(norm_placement="pre", activation="gelu", eps=1e-6, fully_masked_rows="nan")
SPACE = ConfigSpace(split_heads=True)

adapter = TorchModuleAdapter("mmpretrain-vit", [
    TorchEntry("patch_embed", make=make_patch_embed, forward=forward_patch_embed,
               param_map={"weight": "projection.weight", "bias": "projection.bias"}),
    TorchEntry("encoder_layer", make=make_layer, forward=forward_layer, param_map=layer_param_map,
               conventions=MASKED, supports=SPACE),
    TorchEntry("encoder", make=make_backbone_layers, forward=forward_encoder, param_map=encoder_map,
               conventions=MASKED, supports=SPACE),
    TorchEntry("vit", make=make_classifier, forward=lambda model, images: model(images), param_map=vit_map,
               conventions=Conventions(norm_placement="pre", activation="gelu", eps=1e-6), supports=SPACE),
])
