# fmt: off
# ruff: noqa
"""The Vision Transformer of FlashAttention (``flash_attn/models/vit.py``) written in plain
torch: ``PatchEmbed`` as a ``Linear`` over ``rearrange(x, "b c (h p1) (w p2) -> b h w (c p1
p2)")`` (here ``reshape`` / ``permute``), ``Block``s with ``prenorm=True`` that carry the
residual stream between blocks (``hidden_states, residual = block(hidden_states,
residual)``; the add is done inside the next block's ``dropout_add_layer_norm``, written out
as ``ln(dropout(x) + residual)`` returning both), ``MHA`` with one ``Wqkv`` split by
``rearrange("... (three h d) -> ... three h d")`` (here ``reshape``), a GELU ``Mlp``
``fc1`` / ``fc2``, a class token, a learned position embedding, the final
``dropout_add_layer_norm``, then the class token's head.

Written for the twenty-first blind benchmark (tests/blind21).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import Chunk, ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def dropout_add_layer_norm(x0, residual, weight, bias, dropout_p, epsilon, prenorm=False):
    """``ln(dropout(x0) + residual)``, the fused op of flash_attn.ops.layer_norm written out;
    with ``prenorm`` also the sum itself (the residual stream the next block adds to)."""
    dropped = F.dropout(x0, p=dropout_p, training=False)
    out = dropped + residual if residual is not None else dropped
    normed = F.layer_norm(out, (out.shape[-1],), weight, bias, epsilon)
    return (normed, out) if prenorm else normed


class PatchEmbed(nn.Module):
    """2D Image to Patch Embedding (a Linear over flattened patches)."""
    def __init__(self, img_size=16, patch_size=4, in_chans=3, embed_dim=32, bias=True):
        super().__init__()
        self.img_size = (img_size, img_size)
        self.patch_size = (patch_size, patch_size)
        self.grid_size = (img_size // patch_size, img_size // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Linear(in_chans * patch_size * patch_size, embed_dim, bias=bias)

    def forward(self, x):
        _, _, H, W = x.shape
        assert H == self.img_size[0] and W == self.img_size[1], (
            f"Input image size ({H}*{W}) doesn't match model ({self.img_size[0]}*{self.img_size[1]}).")
        B, C = x.shape[:2]
        p1, p2 = self.patch_size
        x = x.reshape(B, C, H // p1, p1, W // p2, p2)
        x = x.permute(0, 2, 4, 1, 3, 5).reshape(B, H // p1, W // p2, C * p1 * p2)
        x = self.proj(x)
        x = x.flatten(1, 2)  # "b h w c -> b (h w) c"
        return x


class MHA(nn.Module):
    """Multi-head self-attention (flash_attn.modules.mha.MHA, the SelfAttention path)."""
    def __init__(self, embed_dim, num_heads, qkv_proj_bias=True, out_proj_bias=True, dropout=0.0):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = self.embed_dim // num_heads
        self.Wqkv = nn.Linear(embed_dim, 3 * embed_dim, bias=qkv_proj_bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=out_proj_bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, key_padding_mask=None, causal=False):
        qkv = self.Wqkv(x)
        qkv = qkv.reshape(*qkv.shape[:-1], 3, self.num_heads, self.head_dim)  # "... (three h d) -> ... three h d"
        q, k, v = qkv.unbind(dim=2)
        softmax_scale = 1.0 / math.sqrt(q.shape[-1])
        scores = torch.einsum("bthd,bshd->bhts", q, k * softmax_scale)
        seqlen = x.shape[1]
        keep = torch.ones((seqlen, seqlen), dtype=torch.bool, device=x.device)[None, None]
        if key_padding_mask is not None:
            keep = keep & key_padding_mask[:, None, None, :]
        if causal:
            keep = keep & torch.tril(torch.ones((seqlen, seqlen), dtype=torch.bool, device=x.device))
        scores = scores.masked_fill(~keep, float("-inf"))
        attention = torch.softmax(scores, dim=-1, dtype=torch.promote_types(v.dtype, torch.float32)).to(v.dtype)
        attention_drop = self.drop(attention)
        context = torch.einsum("bhts,bshd->bthd", attention_drop, v)
        return self.out_proj(context.reshape(*context.shape[:2], self.embed_dim))  # "... h d -> ... (h d)"


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features, bias1=True, bias2=True):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features, bias=bias1)
        self.activation = nn.GELU()
        self.fc2 = nn.Linear(hidden_features, in_features, bias=bias2)

    def forward(self, x):
        y = self.fc1(x)
        y = self.activation(y)
        y = self.fc2(y)
        return y


class Block(nn.Module):
    """Prenorm block: Dropout -> Add -> LN -> MHA -> Dropout -> Add -> LN -> MLP; returns the
    MLP's output and the residual stream it is to be added to (by the next block)."""
    def __init__(self, dim, num_heads, mlp_hidden, eps=1e-6, resid_dropout1=0.0, resid_dropout2=0.0):
        super().__init__()
        self.mixer = MHA(dim, num_heads)
        self.dropout1 = nn.Dropout(resid_dropout1)
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, mlp_hidden)
        self.dropout2 = nn.Dropout(resid_dropout2)
        self.norm2 = nn.LayerNorm(dim, eps=eps)

    def forward(self, hidden_states, residual=None, key_padding_mask=None, causal=False):
        hidden_states, residual = dropout_add_layer_norm(
            hidden_states, residual, self.norm1.weight, self.norm1.bias,
            self.dropout1.p if self.training else 0.0, self.norm1.eps, prenorm=True)
        hidden_states = self.mixer(hidden_states, key_padding_mask=key_padding_mask, causal=causal)
        hidden_states, residual = dropout_add_layer_norm(
            hidden_states, residual, self.norm2.weight, self.norm2.bias,
            self.dropout2.p if self.training else 0.0, self.norm2.eps, prenorm=True)
        hidden_states = self.mlp(hidden_states)
        return hidden_states, residual


class Encoder(nn.Module):
    """The blocks and the final ``dropout_add_layer_norm`` of VisionTransformer.forward_features."""
    def __init__(self, depth, dim, num_heads, mlp_hidden, eps=1e-6, drop_rate=0.0):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim, num_heads, mlp_hidden, eps) for _ in range(depth)])
        self.dropout = nn.Dropout(p=drop_rate)
        self.norm = nn.LayerNorm(dim, eps=eps)

    def forward(self, hidden_states, key_padding_mask=None, causal=False):
        residual = None
        for block in self.blocks:
            hidden_states, residual = block(hidden_states, residual, key_padding_mask, causal)
        hidden_states = dropout_add_layer_norm(
            hidden_states, residual, self.norm.weight, self.norm.bias,
            self.dropout.p if self.training else 0.0, self.norm.eps, prenorm=False)
        return hidden_states


class VisionTransformer(nn.Module):
    def __init__(self, img_size=16, patch_size=4, in_chans=3, num_classes=10, embed_dim=32,
                 depth=2, num_heads=4, mlp_hidden=64, drop_rate=0.0, global_pool="token"):
        super().__init__()
        self.global_pool = global_pool
        self.num_prefix_tokens = 1
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        num_patches = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        embed_len = num_patches + self.num_prefix_tokens
        self.pos_embed = nn.Parameter(torch.randn(1, embed_len, embed_dim) * .02)
        self.pos_drop = nn.Dropout(p=drop_rate)
        self.encoder = Encoder(depth, embed_dim, num_heads, mlp_hidden, 1e-6, drop_rate)
        self.head = nn.Linear(embed_dim, num_classes)

    def _pos_embed(self, x):
        # original timm, JAX, and deit vit impl
        # pos_embed has entry for class token, concat then add
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        x = x + self.pos_embed
        return self.pos_drop(x)

    def forward_features(self, x):
        x = self.patch_embed(x)
        hidden_states = self._pos_embed(x)
        return self.encoder(hidden_states)

    def forward_head(self, x, pre_logits=False):
        if self.global_pool:
            x = x[:, self.num_prefix_tokens:].mean(dim=1) if self.global_pool == "avg" else x[:, 0]
        return x if pre_logits else self.head(x)

    def forward(self, x):
        x = self.forward_features(x)
        x = self.forward_head(x)
        return x


# ---- the adapter ------------------------------------------------------------------------


def block_map(prefix, mine):
    names = {}
    for p in ("weight", "bias"):
        for i, part in enumerate("qkv"):
            names[f"{prefix}self_attn.{part}.{p}"] = Chunk(f"{mine}mixer.Wqkv.{p}", i, 3)
        names[f"{prefix}self_attn.o.{p}"] = f"{mine}mixer.out_proj.{p}"
        names[f"{prefix}norm1.{p}"] = f"{mine}norm1.{p}"
        names[f"{prefix}norm2.{p}"] = f"{mine}norm2.{p}"
        names[f"{prefix}ffn.fc1.{p}"] = f"{mine}mlp.fc1.{p}"
        names[f"{prefix}ffn.fc2.{p}"] = f"{mine}mlp.fc2.{p}"
    return names


def encoder_map(prefix, mine, config):
    names = {}
    for i in range(config.n_layers):
        names |= block_map(f"{prefix}layers.{i}.", f"{mine}blocks.{i}.")
    names[f"{prefix}norm.weight"] = f"{mine}norm.weight"
    names[f"{prefix}norm.bias"] = f"{mine}norm.bias"
    return names


def patch_map(prefix, mine, config):
    shape = (config.d_model, config.channels, config.patch_size, config.patch_size)
    return {f"{prefix}weight": Param(f"{mine}proj.weight", shape=shape), f"{prefix}bias": f"{mine}proj.bias"}


def vit_map(config):
    names = patch_map("patch_embed.", "patch_embed.", config)
    names |= {"cls_token": "cls_token", "pos_embed": "pos_embed", "head.weight": "head.weight", "head.bias": "head.bias"}
    names |= encoder_map("encoder.", "encoder.", config)
    return names


def as_flag(causal):
    return causal is not None and bool(causal)


def layer_forward(block, x, key_padding=None, causal=None):
    hidden_states, residual = block(x, None, key_padding, as_flag(causal))
    return hidden_states + residual  # the add the next block's dropout_add_layer_norm makes


def encoder_forward(encoder, x, key_padding=None, causal=None):
    return encoder(x, key_padding, as_flag(causal))


def make_vit(config):
    return VisionTransformer(config.image_size, config.patch_size, config.channels, config.n_classes,
                             config.d_model, config.n_layers, config.n_heads, config.d_ff)


DECLARED = Conventions(norm_placement="pre", activation="gelu", eps=1e-6, fully_masked_rows="nan")
SPACE = ConfigSpace(split_heads=True)

adapter = TorchModuleAdapter("flash-vit", [
    TorchEntry(
        "patch_embed",
        make=lambda config: PatchEmbed(config.image_size, config.patch_size, config.channels, config.d_model),
        forward=lambda pe, images: pe(images),
        param_map=lambda config: patch_map("", "", config),
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: Block(config.d_model, config.n_heads, config.d_ff, 1e-6),
        forward=layer_forward,
        param_map=block_map("", ""),
        conventions=DECLARED,
        supports=SPACE,
    ),
    TorchEntry(
        "encoder",
        make=lambda config: Encoder(config.n_layers, config.d_model, config.n_heads, config.d_ff, 1e-6),
        forward=encoder_forward,
        param_map=lambda config: encoder_map("", "", config),
        conventions=DECLARED,
        supports=SPACE,
    ),
    TorchEntry(
        "vit",
        make=make_vit,
        forward=lambda vit, images: vit(images),
        param_map=vit_map,
        conventions=Conventions(norm_placement="pre", activation="gelu", eps=1e-6),
        supports=SPACE,
    ),
])
