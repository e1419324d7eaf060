# fmt: off
# ruff: noqa
"""A ViT as microsoft/unilm's BEiT fine-tuning model (beit/modeling_finetune.py) writes it,
with the timm 0.3-era helpers it imports (to_2tuple, drop_path, trunc_normal_): the attention's
``qkv`` Linear without bias plus ``q_bias``/``v_bias`` parameters concatenated around a zero key
bias and applied with ``F.linear``, ``q = q * self.scale``, Block with optional layer-scale
``gamma_1``/``gamma_2`` (off: ``init_values=None``), the image-size assertion of PatchEmbed,
absolute position embeddings, no relative position bias, and class-token pooling
(``use_mean_pooling=False``: ``norm`` then ``x[:, 0]``).
"""

import math
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


# ---------------------------------------------------------------- timm.models.layers
def to_2tuple(x):
    if isinstance(x, (tuple, list)):
        return tuple(x)
    return (x, x)


def drop_path(x, drop_prob: float = 0., training: bool = False):
    if drop_prob == 0. or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # work with diff dim tensors, not just 2D ConvNets
    random_tensor = keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)
    random_tensor.floor_()  # binarize
    output = x.div(keep_prob) * random_tensor
    return output


def trunc_normal_(tensor, mean=0., std=1.):
    return nn.init.trunc_normal_(tensor, mean=mean, std=std, a=-std, b=std)


# ---------------------------------------------------------------- beit/modeling_finetune.py
class DropPath(nn.Module):
    """Drop paths (Stochastic Depth) per sample  (when applied in main path of residual blocks).
    """
    def __init__(self, drop_prob=None):
        super(DropPath, self).__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)

    def extra_repr(self) -> str:
        return 'p={}'.format(self.drop_prob)


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
        # x = self.drop(x)
        # commit this for the orignal BERT implement
        x = self.fc2(x)
        x = self.drop(x)
        return x


class Attention(nn.Module):
    def __init__(
            self, dim, num_heads=8, qkv_bias=False, qk_scale=None, attn_drop=0.,
            proj_drop=0., window_size=None, attn_head_dim=None):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        if attn_head_dim is not None:
            head_dim = attn_head_dim
        all_head_dim = head_dim * self.num_heads
        self.scale = qk_scale or head_dim ** -0.5

        self.qkv = nn.Linear(dim, all_head_dim * 3, bias=False)
        if qkv_bias:
            self.q_bias = nn.Parameter(torch.zeros(all_head_dim))
            self.v_bias = nn.Parameter(torch.zeros(all_head_dim))
        else:
            self.q_bias = None
            self.v_bias = None

        # window_size is None: no relative position bias table
        self.window_size = None
        self.relative_position_bias_table = None
        self.relative_position_index = None

        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(all_head_dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x, rel_pos_bias=None):
        B, N, C = x.shape
        qkv_bias = None
        if self.q_bias is not None:
            qkv_bias = torch.cat((self.q_bias, torch.zeros_like(self.v_bias, requires_grad=False), self.v_bias))
        # qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        qkv = F.linear(input=x, weight=self.qkv.weight, bias=qkv_bias)
        qkv = qkv.reshape(B, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]   # make torchscript happy (cannot use tensor as tuple)

        q = q * self.scale
        attn = (q @ k.transpose(-2, -1))

        if self.relative_position_bias_table is not None:
            raise NotImplementedError("relative position bias is not used here")

        if rel_pos_bias is not None:
            attn = attn + rel_pos_bias

        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)

        x = (attn @ v).transpose(1, 2).reshape(B, N, -1)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class Block(nn.Module):

    def __init__(self, dim, num_heads, mlp_ratio=4., qkv_bias=False, qk_scale=None, drop=0., attn_drop=0.,
                 drop_path=0., init_values=None, act_layer=nn.GELU, norm_layer=nn.LayerNorm,
                 window_size=None, attn_head_dim=None):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = Attention(
            dim, num_heads=num_heads, qkv_bias=qkv_bias, qk_scale=qk_scale,
            attn_drop=attn_drop, proj_drop=drop, window_size=window_size, attn_head_dim=attn_head_dim)
        # NOTE: drop path for stochastic depth, we shall see if this is better than dropout here
        self.drop_path = DropPath(drop_path) if drop_path > 0. else nn.Identity()
        self.norm2 = norm_layer(dim)
        mlp_hidden_dim = int(dim * mlp_ratio)
        self.mlp = Mlp(in_features=dim, hidden_features=mlp_hidden_dim, act_layer=act_layer, drop=drop)

        if init_values is not None and init_values > 0:
            self.gamma_1 = nn.Parameter(init_values * torch.ones((dim)),requires_grad=True)
            self.gamma_2 = nn.Parameter(init_values * torch.ones((dim)),requires_grad=True)
        else:
            self.gamma_1, self.gamma_2 = None, None

    def forward(self, x, rel_pos_bias=None):
        if self.gamma_1 is None:
            x = x + self.drop_path(self.attn(self.norm1(x), rel_pos_bias=rel_pos_bias))
            x = x + self.drop_path(self.mlp(self.norm2(x)))
        else:
            x = x + self.drop_path(self.gamma_1 * self.attn(self.norm1(x), rel_pos_bias=rel_pos_bias))
            x = x + self.drop_path(self.gamma_2 * self.mlp(self.norm2(x)))
        return x


class PatchEmbed(nn.Module):
    """ Image to Patch Embedding
    """
    def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=768):
        super().__init__()
        img_size = to_2tuple(img_size)
        patch_size = to_2tuple(patch_size)
        num_patches = (img_size[1] // patch_size[1]) * (img_size[0] // patch_size[0])
        self.patch_shape = (img_size[0] // patch_size[0], img_size[1] // patch_size[1])
        self.img_size = img_size
        self.patch_size = patch_size
        self.num_patches = num_patches

        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x, **kwargs):
        B, C, H, W = x.shape
        # FIXME look at relaxing size constraints
        assert H == self.img_size[0] and W == self.img_size[1], \
            f"Input image size ({H}*{W}) doesn't match model ({self.img_size[0]}*{self.img_size[1]})."
        x = self.proj(x).flatten(2).transpose(1, 2)
        return x


class VisionTransformer(nn.Module):
    """ Vision Transformer with support for patch or hybrid CNN input stage
    """
    def __init__(self, img_size=224, patch_size=16, in_chans=3, num_classes=1000, embed_dim=768, depth=12,
                 num_heads=12, mlp_ratio=4., qkv_bias=False, qk_scale=None, drop_rate=0., attn_drop_rate=0.,
                 drop_path_rate=0., norm_layer=nn.LayerNorm, init_values=None,
                 use_abs_pos_emb=True, use_rel_pos_bias=False, use_shared_rel_pos_bias=False,
                 use_mean_pooling=True, init_scale=0.001):
        super().__init__()
        self.num_classes = num_classes
        self.num_features = self.embed_dim = embed_dim  # num_features for consistency with other models

        self.patch_embed = PatchEmbed(
            img_size=img_size, patch_size=patch_size, in_chans=in_chans, embed_dim=embed_dim)
        num_patches = self.patch_embed.num_patches

        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        # self.mask_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        if use_abs_pos_emb:
            self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embed_dim))
        else:
            self.pos_embed = None
        self.pos_drop = nn.Dropout(p=drop_rate)

        self.rel_pos_bias = None

        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]  # stochastic depth decay rule
        self.use_rel_pos_bias = use_rel_pos_bias
        self.blocks = nn.ModuleList([
            Block(
                dim=embed_dim, num_heads=num_heads, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, qk_scale=qk_scale,
                drop=drop_rate, attn_drop=attn_drop_rate, drop_path=dpr[i], norm_layer=norm_layer,
                init_values=init_values, window_size=self.patch_embed.patch_shape if use_rel_pos_bias else None)
            for i in range(depth)])
        self.norm = nn.Identity() if use_mean_pooling else norm_layer(embed_dim)
        self.fc_norm = norm_layer(embed_dim) if use_mean_pooling else None
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()

        if self.pos_embed is not None:
            trunc_normal_(self.pos_embed, std=.02)
        trunc_normal_(self.cls_token, std=.02)
        # trunc_normal_(self.mask_token, std=.02)
        trunc_normal_(self.head.weight, std=.02)
        self.apply(self._init_weights)
        self.fix_init_weight()

        self.head.weight.data.mul_(init_scale)
        self.head.bias.data.mul_(init_scale)

    def fix_init_weight(self):
        def rescale(param, layer_id):
            param.div_(math.sqrt(2.0 * layer_id))

        for layer_id, layer in enumerate(self.blocks):
            rescale(layer.attn.proj.weight.data, layer_id + 1)
            rescale(layer.mlp.fc2.weight.data, layer_id + 1)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            trunc_normal_(m.weight, std=.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    def get_num_layers(self):
        return len(self.blocks)

    def forward_features(self, x):
        x = self.patch_embed(x)
        batch_size, seq_len, _ = x.size()

        cls_tokens = self.cls_token.expand(batch_size, -1, -1)  # stole cls_tokens impl from Phil Wang, thanks
        x = torch.cat((cls_tokens, x), dim=1)
        if self.pos_embed is not None:
            x = x + self.pos_embed
        x = self.pos_drop(x)

        rel_pos_bias = self.rel_pos_bias() if self.rel_pos_bias is not None else None
        for blk in self.blocks:
            x = blk(x, rel_pos_bias=rel_pos_bias)

        x = self.norm(x)
        if self.fc_norm is not None:
            t = x[:, 1:, :]
            return self.fc_norm(t.mean(1))
        else:
            return x[:, 0]

    def forward(self, x):
        x = self.forward_features(x)
        x = self.head(x)
        return x


def beit_base_patch16_224(pretrained=False, **kwargs):
    model = VisionTransformer(
        patch_size=16, embed_dim=768, depth=12, num_heads=12, mlp_ratio=4, qkv_bias=True,
        norm_layer=partial(nn.LayerNorm, eps=1e-6), **kwargs)
    return model


# ---------------------------------------------------------------- the adapter (glue)
class BlocksAndNorm(nn.Module):
    """The encoder subject: the model's blocks and its final norm (a pre-LN stack)."""

    def __init__(self, config):
        super().__init__()
        vit = _make_vit(config)
        self.blocks = vit.blocks
        self.norm = vit.norm

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x, rel_pos_bias=None)
        return self.norm(x)


def _make_vit(config):
    return VisionTransformer(
        img_size=config.image_size, patch_size=config.patch_size, in_chans=config.channels,
        num_classes=config.n_classes, embed_dim=config.d_model, depth=config.n_layers,
        num_heads=config.n_heads, mlp_ratio=config.d_ff / config.d_model, qkv_bias=False,
        norm_layer=partial(nn.LayerNorm, eps=1e-6), init_values=None, use_mean_pooling=False,
        drop_rate=0.1, attn_drop_rate=0.1, drop_path_rate=0.1,
    )


def _make_block(config):
    return Block(dim=config.d_model, num_heads=config.n_heads, mlp_ratio=config.d_ff / config.d_model,
                 qkv_bias=False, norm_layer=partial(nn.LayerNorm, eps=1e-6), drop=0.1, attn_drop=0.1,
                 drop_path=0.1, init_values=None)


def _block_names(prefix, d):
    out = {
        "self_attn.q.weight": Param(f"{prefix}attn.qkv.weight", slice=(0, 0, d)),
        "self_attn.k.weight": Param(f"{prefix}attn.qkv.weight", slice=(0, d, 2 * d)),
        "self_attn.v.weight": Param(f"{prefix}attn.qkv.weight", slice=(0, 2 * d, 3 * d)),
        "self_attn.o.weight": f"{prefix}attn.proj.weight",
        "self_attn.o.bias": f"{prefix}attn.proj.bias",
    }
    for canonical, mine in (("norm1", "norm1"), ("norm2", "norm2"), ("ffn.fc1", "mlp.fc1"), ("ffn.fc2", "mlp.fc2")):
        out.update({f"{canonical}.{p}": f"{prefix}{mine}.{p}" for p in ("weight", "bias")})
    return out


def _block_map(config):
    return _block_names("", config.d_model)


def _encoder_map(config):
    out = {"norm.weight": "norm.weight", "norm.bias": "norm.bias"}
    for i in range(config.n_layers):
        out.update({f"layers.{i}.{k}": v for k, v in _block_names(f"blocks.{i}.", config.d_model).items()})
    return out


def _vit_map(config):
    out = {
        "patch_embed.weight": "patch_embed.proj.weight",
        "patch_embed.bias": "patch_embed.proj.bias",
        "cls_token": "cls_token",
        "pos_embed": "pos_embed",
        "head.weight": "head.weight",
        "head.bias": "head.bias",
        "encoder.norm.weight": "norm.weight",
        "encoder.norm.bias": "norm.bias",
    }
    for i in range(config.n_layers):
        out.update({f"encoder.layers.{i}.{k}": v for k, v in _block_names(f"blocks.{i}.", config.d_model).items()})
    return out


_CONVENTIONS = Conventions(norm_placement="pre", activation="gelu", eps=1e-6)
_QKV_BIAS = {"attention_bias": False, "attention_out_bias": True}
_SPACE = ConfigSpace(split_heads=True, biases={"attention": False, "attention_out": True})

adapter = TorchModuleAdapter("beit-vit", [
    TorchEntry(
        "patch_embed",
        make=lambda config: PatchEmbed(img_size=config.image_size, patch_size=config.patch_size,
                                       in_chans=config.channels, embed_dim=config.d_model),
        forward=lambda embed, images: embed(images),
        param_map={"weight": "proj.weight", "bias": "proj.bias"},
        conventions=_CONVENTIONS,
    ),
    TorchEntry(
        "encoder_layer",
        make=_make_block,
        forward=lambda block, x: block(x),
        param_map=_block_map,
        conventions=_CONVENTIONS,
        config=_QKV_BIAS,
        supports=_SPACE,
    ),
    TorchEntry(
        "encoder",
        make=BlocksAndNorm,
        forward=lambda encoder, x: encoder(x),
        param_map=_encoder_map,
        conventions=_CONVENTIONS,
        config=_QKV_BIAS,
        supports=_SPACE,
    ),
    TorchEntry(
        "vit",
        make=_make_vit,
        forward=lambda vit, images: vit(images),
        param_map=_vit_map,
        conventions=_CONVENTIONS,
        config=_QKV_BIAS,
        supports=_SPACE,
    ),
])
