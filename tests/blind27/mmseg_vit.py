# fmt: off
# ruff: noqa
"""MMSegmentation's plain ``VisionTransformer`` backbone (``mmseg/models/backbones/vit.py``,
1.x) with the mmcv pieces it builds (``PatchEmbed`` from ``mmseg/models/utils/embed.py``,
mmcv's ``MultiheadAttention`` wrapper around ``nn.MultiheadAttention`` and ``FFN``,
``build_norm_layer``), written out in plain torch (no registry), and an mmpretrain-style
``ImageClassifier`` with a ``VisionTransformerClsHead`` on the class token; then the kit's
adapter (the glue at the end of the file). Blind set 27, written for this benchmark."""

import math
import warnings
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import ModuleList, Sequential


def to_2tuple(x):
    return x if isinstance(x, tuple) else (x, x)


def build_norm_layer(cfg, num_features, postfix=''):
    """Build normalization layer: returns (name, layer), the name the abbreviation plus postfix."""
    cfg_ = cfg.copy()
    layer_type = cfg_.pop('type')
    assert layer_type == 'LN', f'Unrecognized norm type {layer_type}'
    abbr = 'ln'
    name = abbr + str(postfix)
    requires_grad = cfg_.pop('requires_grad', True)
    cfg_.setdefault('eps', 1e-5)
    layer = nn.LayerNorm(num_features, **cfg_)
    for param in layer.parameters():
        param.requires_grad = requires_grad
    return name, layer


def build_activation_layer(cfg):
    cfg_ = cfg.copy()
    layer_type = cfg_.pop('type')
    assert layer_type == 'GELU', f'Unrecognized activation type {layer_type}'
    return nn.GELU(**cfg_)


def build_dropout(cfg):
    cfg_ = cfg.copy()
    layer_type = cfg_.pop('type')
    if layer_type == 'DropPath':
        return DropPath(cfg_['drop_prob'])
    return nn.Dropout(cfg_['drop_prob'])


def drop_path(x, drop_prob=0., training=False):
    if drop_prob == 0. or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0], ) + (1, ) * (x.ndim - 1)
    random_tensor = keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)
    output = x.div(keep_prob) * random_tensor.floor()
    return output


class DropPath(nn.Module):
    def __init__(self, drop_prob=0.1):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)


class MultiheadAttention(nn.Module):
    """A wrapper for ``torch.nn.MultiheadAttention`` (mmcv.cnn.bricks.transformer), with an
    identity connection and built-in dropout."""

    def __init__(self, embed_dims, num_heads, attn_drop=0., proj_drop=0., dropout_layer=dict(type='Dropout', drop_prob=0.), init_cfg=None, batch_first=False, **kwargs):
        super().__init__()
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.batch_first = batch_first

        self.attn = nn.MultiheadAttention(embed_dims, num_heads, attn_drop, **kwargs)

        self.proj_drop = nn.Dropout(proj_drop)
        self.dropout_layer = build_dropout(dropout_layer) if dropout_layer else nn.Identity()

    def forward(self, query, key=None, value=None, identity=None, query_pos=None, key_pos=None, attn_mask=None, key_padding_mask=None, **kwargs):
        if key is None:
            key = query
        if value is None:
            value = key
        if identity is None:
            identity = query
        if key_pos is None:
            if query_pos is not None:
                # use query_pos if key_pos is not available
                if query_pos.shape == key.shape:
                    key_pos = query_pos
                else:
                    warnings.warn(f'position encoding of key is missing in {self.__class__.__name__}.')
        if query_pos is not None:
            query = query + query_pos
        if key_pos is not None:
            key = key + key_pos

        # Because the dataflow('key', 'query', 'value') of
        # ``torch.nn.MultiheadAttention`` is (num_query, batch,
        # embed_dims), We should adjust the shape of dataflow from
        # batch_first (batch, num_query, embed_dims) to num_query_first
        # (num_query ,batch, embed_dims), and recover ``attn_output``
        # from num_query_first to batch_first.
        if self.batch_first:
            query = query.transpose(0, 1)
            key = key.transpose(0, 1)
            value = value.transpose(0, 1)

        out = self.attn(query=query, key=key, value=value, attn_mask=attn_mask, key_padding_mask=key_padding_mask)[0]

        if self.batch_first:
            out = out.transpose(0, 1)

        return identity + self.dropout_layer(self.proj_drop(out))


class FFN(nn.Module):
    """Implements feed-forward networks (FFNs) with identity connection (mmcv)."""

    def __init__(self, embed_dims=256, feedforward_channels=1024, num_fcs=2, act_cfg=dict(type='GELU'), ffn_drop=0., dropout_layer=None, add_identity=True, init_cfg=None):
        super().__init__()
        assert num_fcs >= 2, 'num_fcs should be no less than 2. ' f'got {num_fcs}.'
        self.embed_dims = embed_dims
        self.feedforward_channels = feedforward_channels
        self.num_fcs = num_fcs

        layers = []
        in_channels = embed_dims
        for _ in range(num_fcs - 1):
            layers.append(
                Sequential(
                    nn.Linear(in_channels, feedforward_channels), build_activation_layer(act_cfg),
                    nn.Dropout(ffn_drop)))
            in_channels = feedforward_channels
        layers.append(nn.Linear(feedforward_channels, embed_dims))
        layers.append(nn.Dropout(ffn_drop))
        self.layers = Sequential(*layers)
        self.dropout_layer = build_dropout(dropout_layer) if dropout_layer else torch.nn.Identity()
        self.add_identity = add_identity

    def forward(self, x, identity=None):
        """Forward function for `FFN`. The function would add x to the output tensor if residue is None."""
        out = self.layers(x)
        if not self.add_identity:
            return self.dropout_layer(out)
        if identity is None:
            identity = x
        return identity + self.dropout_layer(out)


class PatchEmbed(nn.Module):
    """Image to Patch Embedding V2 (mmseg/models/utils/embed.py), without adaptive padding."""

    def __init__(self, in_channels=3, embed_dims=768, conv_type='Conv2d', kernel_size=16, stride=None, padding=0, dilation=1, bias=True, norm_cfg=None, input_size=None, init_cfg=None):
        super().__init__()
        self.embed_dims = embed_dims
        if stride is None:
            stride = kernel_size
        kernel_size = to_2tuple(kernel_size)
        stride = to_2tuple(stride)
        dilation = to_2tuple(dilation)
        self.adap_padding = None
        padding = to_2tuple(padding)
        self.init_input_size = to_2tuple(input_size) if input_size is not None else None

        self.projection = nn.Conv2d(in_channels=in_channels, out_channels=embed_dims, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation, bias=bias)

        if norm_cfg is not None:
            self.norm = build_norm_layer(norm_cfg, embed_dims)[1]
        else:
            self.norm = None

    def forward(self, x):
        """
        Returns:
            tuple: Contains merged results and its spatial shape.
            - x (Tensor): Has shape (B, out_h * out_w, embed_dims)
            - out_size (tuple[int]): Spatial shape of x, arrange as (out_h, out_w).
        """
        if self.adap_padding:
            x = self.adap_padding(x)
        if self.init_input_size is not None:
            assert tuple(x.shape[2:]) == self.init_input_size, f'Input image size {tuple(x.shape[2:])} does not match the model ({self.init_input_size}).'

        x = self.projection(x)
        out_size = (x.shape[2], x.shape[3])
        x = x.flatten(2).transpose(1, 2)
        if self.norm is not None:
            x = self.norm(x)
        return x, out_size


class TransformerEncoderLayer(nn.Module):
    """Implements one encoder layer in Vision Transformer."""

    def __init__(self, embed_dims, num_heads, feedforward_channels, drop_rate=0., attn_drop_rate=0., drop_path_rate=0., num_fcs=2, qkv_bias=True, act_cfg=dict(type='GELU'), norm_cfg=dict(type='LN'), batch_first=True, attn_cfg=dict(), ffn_cfg=dict(), with_cp=False):
        super().__init__()

        self.norm1_name, norm1 = build_norm_layer(norm_cfg, embed_dims, postfix=1)
        self.add_module(self.norm1_name, norm1)

        attn_cfg.update(dict(embed_dims=embed_dims, num_heads=num_heads, attn_drop=attn_drop_rate, proj_drop=drop_rate, batch_first=batch_first, bias=qkv_bias))

        self.build_attn(attn_cfg)

        self.norm2_name, norm2 = build_norm_layer(norm_cfg, embed_dims, postfix=2)
        self.add_module(self.norm2_name, norm2)

        ffn_cfg.update(dict(embed_dims=embed_dims, feedforward_channels=feedforward_channels, num_fcs=num_fcs, ffn_drop=drop_rate, dropout_layer=dict(type='DropPath', drop_prob=drop_path_rate) if drop_path_rate > 0 else None, act_cfg=act_cfg))
        self.build_ffn(ffn_cfg)
        self.with_cp = with_cp

    def build_attn(self, attn_cfg):
        self.attn = MultiheadAttention(**attn_cfg)

    def build_ffn(self, ffn_cfg):
        self.ffn = FFN(**ffn_cfg)

    @property
    def norm1(self):
        return getattr(self, self.norm1_name)

    @property
    def norm2(self):
        return getattr(self, self.norm2_name)

    def forward(self, x, attn_mask=None):

        def _inner_forward(x):
            x = self.attn(self.norm1(x), identity=x, attn_mask=attn_mask)
            x = self.ffn(self.norm2(x), identity=x)
            return x

        x = _inner_forward(x)
        return x


class VisionTransformer(nn.Module):
    """Vision Transformer (mmseg): returns, for each index of ``out_indices``, the patch tokens
    as a feature map [B, C, H, W] and, with ``output_cls_token``, the class token beside it."""

    def __init__(self, img_size=224, patch_size=16, patch_pad='corner', in_channels=3, embed_dims=768, num_layers=12, num_heads=12, mlp_ratio=4, out_origin=False, out_indices=-1, qkv_bias=True, drop_rate=0., attn_drop_rate=0., drop_path_rate=0., with_cls_token=True, output_cls_token=False, norm_cfg=dict(type='LN'), act_cfg=dict(type='GELU'), patch_norm=False, pre_norm=False, final_norm=False, interpolate_mode='bicubic', num_fcs=2):
        super().__init__()

        if isinstance(img_size, int):
            img_size = to_2tuple(img_size)
        elif isinstance(img_size, tuple):
            if len(img_size) == 1:
                img_size = to_2tuple(img_size[0])
            assert len(img_size) == 2, f'The size of image should have length 1 or 2, but got {len(img_size)}'

        if output_cls_token:
            assert with_cls_token is True, f'with_cls_token must be True if' f'set output_cls_token to True, but got {with_cls_token}'

        self.img_size = img_size
        self.patch_size = patch_size
        self.interpolate_mode = interpolate_mode
        self.out_origin = out_origin

        self.patch_embed = PatchEmbed(
            in_channels=in_channels,
            embed_dims=embed_dims,
            conv_type='Conv2d',
            kernel_size=patch_size,
            stride=patch_size,
            padding=0,
            norm_cfg=norm_cfg if patch_norm else None,
            input_size=img_size,
            init_cfg=None,
        )

        num_patches = (img_size[0] // patch_size) * (img_size[1] // patch_size)

        self.with_cls_token = with_cls_token
        self.output_cls_token = output_cls_token
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dims))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embed_dims))
        self.drop_after_pos = nn.Dropout(p=drop_rate)
        self.pre_norm = pre_norm

        if isinstance(out_indices, int):
            if out_indices == -1:
                out_indices = num_layers - 1
            self.out_indices = [out_indices]
        elif isinstance(out_indices, list) or isinstance(out_indices, tuple):
            self.out_indices = out_indices
        else:
            raise TypeError('out_indices must be type of int, list or tuple')

        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, num_layers)]  # stochastic depth decay rule

        self.layers = ModuleList()
        for i in range(num_layers):
            self.layers.append(
                TransformerEncoderLayer(
                    embed_dims=embed_dims,
                    num_heads=num_heads,
                    feedforward_channels=mlp_ratio * embed_dims,
                    attn_drop_rate=attn_drop_rate,
                    drop_rate=drop_rate,
                    drop_path_rate=dpr[i],
                    num_fcs=num_fcs,
                    qkv_bias=qkv_bias,
                    act_cfg=act_cfg,
                    norm_cfg=norm_cfg,
                    batch_first=True))

        self.final_norm = final_norm
        if final_norm:
            self.norm1_name, norm1 = build_norm_layer(norm_cfg, embed_dims, postfix=1)
            self.add_module(self.norm1_name, norm1)

    @property
    def norm1(self):
        return getattr(self, self.norm1_name)

    def init_weights(self):
        nn.init.trunc_normal_(self.pos_embed, std=.02)
        nn.init.trunc_normal_(self.cls_token, std=.02)
        for n, m in self.named_modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=.02)
                if m.bias is not None:
                    if 'ffn' in n:
                        nn.init.normal_(m.bias, mean=0., std=1e-6)
                    else:
                        nn.init.constant_(m.bias, 0)

    def _pos_embeding(self, patched_img, hw_shape, pos_embed):
        """Positioning embeding method: resize the pos_embed when the input image size does not
        match the training size."""
        assert patched_img.ndim == 3 and pos_embed.ndim == 3, 'the shapes of patched_img and pos_embed must be [B, L, C]'
        x_len, pos_len = patched_img.shape[1], pos_embed.shape[1]
        if x_len != pos_len:
            if pos_len == (self.img_size[0] // self.patch_size) * (self.img_size[1] // self.patch_size) + 1:
                pos_h = self.img_size[0] // self.patch_size
                pos_w = self.img_size[1] // self.patch_size
            else:
                raise ValueError('Unexpected shape of pos_embed, got {}.'.format(pos_embed.shape))
            pos_embed = self.resize_pos_embed(pos_embed, hw_shape, (pos_h, pos_w), self.interpolate_mode)
        return self.drop_after_pos(patched_img + pos_embed)

    @staticmethod
    def resize_pos_embed(pos_embed, input_shpae, pos_shape, mode):
        """Resize pos_embed weights (bicubic on the patch part; the class token's row kept)."""
        assert pos_embed.ndim == 3, 'shape of pos_embed must be [B, L, C]'
        pos_h, pos_w = pos_shape
        cls_token_weight = pos_embed[:, 0]
        pos_embed_weight = pos_embed[:, (-1 * pos_h * pos_w):]
        pos_embed_weight = pos_embed_weight.reshape(1, pos_h, pos_w, pos_embed.shape[2]).permute(0, 3, 1, 2)
        pos_embed_weight = F.interpolate(pos_embed_weight, size=input_shpae, align_corners=False, mode=mode)
        cls_token_weight = cls_token_weight.unsqueeze(1)
        pos_embed_weight = torch.flatten(pos_embed_weight, 2).transpose(1, 2)
        pos_embed = torch.cat((cls_token_weight, pos_embed_weight), dim=1)
        return pos_embed

    def forward(self, inputs):
        B = inputs.shape[0]

        x, hw_shape = self.patch_embed(inputs)

        # stole cls_tokens impl from Phil Wang, thanks
        cls_tokens = self.cls_token.expand(B, -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)
        x = self._pos_embeding(x, hw_shape, self.pos_embed)

        if not self.with_cls_token:
            # Remove class token for transformer encoder input
            x = x[:, 1:]

        outs = []
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i == len(self.layers) - 1:
                if self.final_norm:
                    x = self.norm1(x)
            if i in self.out_indices:
                if self.with_cls_token:
                    # Remove class token and reshape token for decoder head
                    out = x[:, 1:]
                else:
                    out = x
                B, _, C = out.shape
                out = out.reshape(B, hw_shape[0], hw_shape[1], C).permute(0, 3, 1, 2).contiguous()
                if self.output_cls_token:
                    out = [out, x[:, 0]]
                outs.append(out)

        return tuple(outs)


class VisionTransformerClsHead(nn.Module):
    """Vision Transformer classifier head (mmpretrain), without the hidden pre-logits layer."""

    def __init__(self, num_classes, in_channels, hidden_dim=None):
        super().__init__()
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.hidden_dim = hidden_dim
        layers = [('head', nn.Linear(self.in_channels, self.num_classes))]
        self.layers = Sequential(OrderedDict(layers))

    def pre_logits(self, feats):
        """The process before the final classification head: the class token of the last stage."""
        feat = feats[-1]  # Obtain feature of the last scale.
        # For backward-compatibility with the previous ViT output
        _, cls_token = feat
        return cls_token

    def forward(self, feats):
        pre_logits = self.pre_logits(feats)
        cls_score = self.layers.head(pre_logits)
        return cls_score


class ImageClassifier(nn.Module):
    """backbone -> head, as mmpretrain's ImageClassifier in 'tensor' mode (no neck)."""

    def __init__(self, backbone, head):
        super().__init__()
        self.backbone = backbone
        self.head = head

    def extract_feat(self, inputs):
        return self.backbone(inputs)

    def forward(self, inputs):
        feats = self.extract_feat(inputs)
        return self.head(feats)


# ---- the kit's adapter (glue, not part of the port) -------------------------------------------

from tck.adapters import Chunk, ConfigSpace, Times, TorchEntry, TorchModuleAdapter  # noqa: E402
from tck.reference import Conventions  # noqa: E402

NORM_CFG = dict(type='LN', eps=1e-6)  # mmseg's vit configs: norm_cfg=dict(type='LN', eps=1e-6)


def _backbone(config):
    backbone = VisionTransformer(
        img_size=config.image_size, patch_size=config.patch_size, in_channels=config.channels,
        embed_dims=config.d_model, num_layers=config.n_layers, num_heads=config.n_heads,
        mlp_ratio=config.d_ff // config.d_model, qkv_bias=True, with_cls_token=True,
        output_cls_token=True, norm_cfg=NORM_CFG, act_cfg=dict(type='GELU'), final_norm=True,
        drop_rate=0.1, attn_drop_rate=0.1, drop_path_rate=0.1,  # mmseg's vit configs train with these
    )
    backbone.init_weights()
    return backbone


def _classifier(config):
    return ImageClassifier(_backbone(config), VisionTransformerClsHead(config.n_classes, config.d_model))


def _layer(config):
    return TransformerEncoderLayer(
        embed_dims=config.d_model, num_heads=config.n_heads, feedforward_channels=config.d_ff,
        qkv_bias=True, act_cfg=dict(type='GELU'), norm_cfg=NORM_CFG, batch_first=True,
    )


class BlocksAndNorm(nn.Module):
    """The kit's `encoder`: the backbone's layers and its final norm (a pre-LN stack)."""

    def __init__(self, config):
        super().__init__()
        self.layers = ModuleList([_layer(config) for _ in range(config.n_layers)])
        self.ln1 = build_norm_layer(NORM_CFG, config.d_model, postfix=1)[1]

    def forward(self, x, attn_mask=None):
        for layer in self.layers:  # the glue's loop
            x = layer(x, attn_mask=attn_mask)
        return self.ln1(x)


def _additive_mask(x, n_heads, key_padding=None, attn_mask=None, causal=None):
    """One float mask [B * heads, L, L] for nn.MultiheadAttention: the dtype's minimum where the
    kit's keep-masks forbid a key, so a query with no key averages every key."""
    B, L = x.shape[:2]
    if key_padding is None and attn_mask is None and not bool(causal):
        return None
    keep = torch.ones(B, L, L, dtype=torch.bool, device=x.device)
    if key_padding is not None:
        keep = keep & key_padding[:, None, :]
    if attn_mask is not None:
        keep = keep & (attn_mask if attn_mask.dim() == 3 else attn_mask[None])
    if bool(causal):
        keep = keep & torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    mask = torch.zeros(B, L, L, dtype=x.dtype, device=x.device).masked_fill(~keep, torch.finfo(x.dtype).min)
    return mask.repeat_interleave(n_heads, dim=0)


def _run(module, x, n_heads, key_padding=None, attn_mask=None, causal=None):
    return module(x, attn_mask=_additive_mask(x, n_heads, key_padding, attn_mask, causal))


def _layer_map(prefix="", mine=""):
    out = {}
    for p in ("weight", "bias"):
        for i, n in enumerate("qkv"):
            out[f"{prefix}self_attn.{n}.{p}"] = Chunk(f"{mine}attn.attn.in_proj_{p}", i, 3)
        out[f"{prefix}self_attn.o.{p}"] = f"{mine}attn.attn.out_proj.{p}"
        out[f"{prefix}norm1.{p}"] = f"{mine}ln1.{p}"
        out[f"{prefix}norm2.{p}"] = f"{mine}ln2.{p}"
        out[f"{prefix}ffn.fc1.{p}"] = f"{mine}ffn.layers.0.0.{p}"
        out[f"{prefix}ffn.fc2.{p}"] = f"{mine}ffn.layers.1.{p}"
    return out


def _encoder_map(config, prefix="", mine=""):
    out = {}
    for i in range(config.n_layers):
        out |= _layer_map(f"{prefix}layers.{i}.", f"{mine}layers.{i}.")
    out |= {f"{prefix}norm.{p}": f"{mine}ln1.{p}" for p in ("weight", "bias")}
    return out


def _vit_map(config):
    out = {"patch_embed.weight": "backbone.patch_embed.projection.weight",
           "patch_embed.bias": "backbone.patch_embed.projection.bias",
           "cls_token": "backbone.cls_token", "pos_embed": "backbone.pos_embed",
           "head.weight": "head.layers.head.weight", "head.bias": "head.layers.head.bias"}
    return out | _encoder_map(config, "encoder.", "backbone.")


_CONVENTIONS = Conventions(norm_placement="pre", activation="gelu", eps=1e-6, fully_masked_rows="uniform")
_VIT = Conventions(norm_placement="pre", activation="gelu", eps=1e-6)
_SPACE = ConfigSpace(split_heads=True, relations={"d_ff": Times("d_model", 4)})

adapter = TorchModuleAdapter("mmseg-vit", [
    TorchEntry(
        "patch_embed",
        make=lambda config: PatchEmbed(in_channels=config.channels, embed_dims=config.d_model, kernel_size=config.patch_size, stride=config.patch_size, padding=0, input_size=config.image_size),
        forward=lambda pe, images: pe(images)[0],
        param_map={"weight": "projection.weight", "bias": "projection.bias"},
        conventions=_VIT,
    ),
    TorchEntry(
        "encoder_layer",
        make=_layer,
        forward=lambda layer, x, key_padding=None, attn_mask=None, causal=None: _run(layer, x, layer.attn.num_heads, key_padding, attn_mask, causal),
        param_map=_layer_map(),
        conventions=_CONVENTIONS,
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "encoder",
        make=BlocksAndNorm,
        forward=lambda enc, x, key_padding=None, attn_mask=None, causal=None: _run(enc, x, enc.layers[0].attn.num_heads, key_padding, attn_mask, causal),
        param_map=_encoder_map,
        conventions=_CONVENTIONS,
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "vit",
        make=_classifier,
        forward=lambda model, images: model(images),
        param_map=_vit_map,
        conventions=_VIT,
        supports=_SPACE,
    ),
])
