# fmt: off
# ruff: noqa
"""A ViT written as the widely copied tutorial "Implementing Vision Transformer (ViT) in
PyTorch" writes it (F. S. Zuppichini, 2021), for the twenty-fifth blind set: every part an
``nn.Sequential`` subclass, einops ``Rearrange`` / ``Reduce`` / ``repeat`` for the reshapes (here
written in torch, the einops pattern in a comment: einops is not among the kit's dependencies),
``ResidualAdd`` wrappers, separate ``keys`` / ``queries`` / ``values`` linears split with
``rearrange(..., "b n (h d) -> b h n d")``, the scores by ``torch.einsum('bhqd, bhkd -> bhqk')``,
the class token prepended and ``positions`` added in ``PatchEmbedding``.

The tutorial's known slips are not in the correct file (they reappear as bugs): here the scores
are scaled by ``1 / sqrt(head_dim)`` *before* the softmax (the tutorial divides the attention
weights by ``sqrt(emb_size)`` after it), and the head reads the class token (the tutorial's
``Reduce('b n e -> b e', reduction='mean')`` averages every token, class token included) through
``SelectToken``; the head's ``LayerNorm`` is the ViT's final norm.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


class Patchify(nn.Sequential):
    """The conv projection and the rearrange, refusing an image the patches do not tile."""

    def forward(self, x: Tensor) -> Tensor:
        p = self[0].kernel_size[0]
        assert x.shape[-2] % p == 0 and x.shape[-1] % p == 0, f"image size {tuple(x.shape[-2:])} not divisible by patch size {p}"
        return super().forward(x)


class PatchEmbedding(nn.Module):
    def __init__(self, in_channels: int = 3, patch_size: int = 16, emb_size: int = 768, img_size: int = 224):
        self.patch_size = patch_size
        super().__init__()
        self.projection = Patchify(
            # using a conv layer instead of a linear one -> performance gains
            nn.Conv2d(in_channels, emb_size, kernel_size=patch_size, stride=patch_size),
            Rearrange(),  # Rearrange('b e (h) (w) -> b (h w) e')
        )
        self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
        self.positions = nn.Parameter(torch.randn((img_size // patch_size) ** 2 + 1, emb_size))

    def forward(self, x: Tensor) -> Tensor:
        b, _, _, _ = x.shape
        x = self.projection(x)
        cls_tokens = self.cls_token.expand(b, -1, -1)  # repeat(self.cls_token, '() n e -> b n e', b=b)
        # prepend the cls token to the input
        x = torch.cat([cls_tokens, x], dim=1)
        # add position embedding
        x += self.positions
        return x


# einops is not among the kit's dependencies: its three patterns, written in torch
class Rearrange(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(2).transpose(1, 2)


def split_heads(x: Tensor, h: int) -> Tensor:
    b, n, _ = x.shape
    return x.view(b, n, h, -1).permute(0, 2, 1, 3)


def merge_heads(x: Tensor) -> Tensor:
    b, h, n, d = x.shape
    return x.permute(0, 2, 1, 3).reshape(b, n, h * d)


class MultiHeadAttention(nn.Module):
    def __init__(self, emb_size: int = 768, num_heads: int = 8, dropout: float = 0):
        super().__init__()
        self.emb_size = emb_size
        self.num_heads = num_heads
        self.keys = nn.Linear(emb_size, emb_size)
        self.queries = nn.Linear(emb_size, emb_size)
        self.values = nn.Linear(emb_size, emb_size)
        self.att_drop = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x: Tensor, mask: Tensor = None) -> Tensor:
        # split keys, queries and values in num_heads
        queries = split_heads(self.queries(x), self.num_heads)  # rearrange(.., "b n (h d) -> b h n d", h=self.num_heads)
        keys = split_heads(self.keys(x), self.num_heads)
        values = split_heads(self.values(x), self.num_heads)
        # sum up over the last axis
        energy = torch.einsum('bhqd, bhkd -> bhqk', queries, keys)  # batch, num_heads, query_len, key_len
        if mask is not None:
            fill_value = torch.finfo(energy.dtype).min
            energy = energy.masked_fill(~mask, fill_value)

        scaling = (self.emb_size // self.num_heads) ** (1 / 2)
        att = F.softmax(energy / scaling, dim=-1, dtype=torch.promote_types(energy.dtype, torch.float32)).to(energy.dtype)
        att = self.att_drop(att)
        # sum up over the third axis
        out = torch.einsum('bhal, bhlv -> bhav ', att, values)
        out = merge_heads(out)  # rearrange(out, "b h n d -> b n (h d)")
        out = self.projection(out)
        return out


class MaskedSequential(nn.Sequential):
    """An nn.Sequential that hands the keep-mask to the children that take one (the tutorial's
    MultiHeadAttention takes a ``mask`` its nn.Sequential blocks never pass)."""

    def forward(self, x, mask=None):
        for module in self:
            x = module(x, mask=mask) if isinstance(module, (MultiHeadAttention, ResidualAdd, MaskedSequential)) else module(x)
        return x


class ResidualAdd(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, **kwargs):
        res = x
        x = self.fn(x, **kwargs)
        x += res
        return x


class FeedForwardBlock(nn.Sequential):
    def __init__(self, emb_size: int, expansion: int = 4, drop_p: float = 0.):
        super().__init__(
            nn.Linear(emb_size, expansion * emb_size),
            nn.GELU(),
            nn.Dropout(drop_p),
            nn.Linear(expansion * emb_size, emb_size),
        )


class TransformerEncoderBlock(MaskedSequential):
    def __init__(self, emb_size: int = 768, drop_p: float = 0., forward_expansion: int = 4, forward_drop_p: float = 0., eps: float = 1e-5, **kwargs):
        super().__init__(
            ResidualAdd(MaskedSequential(
                nn.LayerNorm(emb_size, eps=eps),
                MultiHeadAttention(emb_size, **kwargs),
                nn.Dropout(drop_p)
            )),
            ResidualAdd(MaskedSequential(
                nn.LayerNorm(emb_size, eps=eps),
                FeedForwardBlock(emb_size, expansion=forward_expansion, drop_p=forward_drop_p),
                nn.Dropout(drop_p)
            ))
        )


class TransformerEncoder(MaskedSequential):
    def __init__(self, depth: int = 12, **kwargs):
        super().__init__(*[TransformerEncoderBlock(**kwargs) for _ in range(depth)])


class SelectToken(nn.Module):
    """The class token's row (the tutorial reduces by the mean here)."""

    def forward(self, x: Tensor) -> Tensor:
        return x[:, 0]


class ClassificationHead(nn.Sequential):
    def __init__(self, emb_size: int = 768, n_classes: int = 1000, eps: float = 1e-5):
        super().__init__(
            SelectToken(),
            nn.LayerNorm(emb_size, eps=eps), nn.Linear(emb_size, n_classes))


class ViT(nn.Sequential):
    def __init__(self,
                in_channels: int = 3,
                patch_size: int = 16,
                emb_size: int = 768,
                img_size: int = 224,
                depth: int = 12,
                n_classes: int = 1000,
                **kwargs):
        super().__init__(
            PatchEmbedding(in_channels, patch_size, emb_size, img_size),
            TransformerEncoder(depth, emb_size=emb_size, **kwargs),
            ClassificationHead(emb_size, n_classes)
        )


# ---- the adapter -----------------------------------------------------------------------------

ATTN = {"q": "queries", "k": "keys", "v": "values", "o": "projection"}


def _expansion(config):
    return config.d_ff // config.d_model


def block_map(config, canonical="", mine=""):
    out = {}
    for p in ("weight", "bias"):
        out |= {f"{canonical}self_attn.{k}.{p}": f"{mine}0.fn.1.{v}.{p}" for k, v in ATTN.items()}
        out[f"{canonical}norm1.{p}"] = f"{mine}0.fn.0.{p}"
        out[f"{canonical}norm2.{p}"] = f"{mine}1.fn.0.{p}"
        out[f"{canonical}ffn.fc1.{p}"] = f"{mine}1.fn.1.0.{p}"
        out[f"{canonical}ffn.fc2.{p}"] = f"{mine}1.fn.1.3.{p}"
    return out


def encoder_map(config, canonical="layers.", mine=""):
    out = {}
    for i in range(config.n_layers):
        out |= block_map(config, f"{canonical}{i}.", f"{mine}{i}.")
    return out


def vit_map(config):
    n = (config.image_size // config.patch_size) ** 2 + 1
    out = {"patch_embed.weight": "0.projection.0.weight", "patch_embed.bias": "0.projection.0.bias",
           "cls_token": "0.cls_token", "pos_embed": Param("0.positions", shape=(1, n, config.d_model)),
           "encoder.norm.weight": "2.1.weight", "encoder.norm.bias": "2.1.bias",
           "head.weight": "2.2.weight", "head.bias": "2.2.bias"}
    return out | encoder_map(config, "encoder.layers.", "1.")


def make_block(config):
    return TransformerEncoderBlock(config.d_model, forward_expansion=_expansion(config), num_heads=config.n_heads)


def make_encoder(config):
    return TransformerEncoder(config.n_layers, emb_size=config.d_model, forward_expansion=_expansion(config), num_heads=config.n_heads)


def make_vit(config):
    return ViT(config.channels, config.patch_size, config.d_model, config.image_size, config.n_layers, config.n_classes,
               forward_expansion=_expansion(config), num_heads=config.n_heads)


def make_patch(config):
    return PatchEmbedding(config.channels, config.patch_size, config.d_model, config.image_size).projection


VIT = Conventions(norm_placement="pre", activation="gelu")
MASKED = Conventions(norm_placement="pre", activation="gelu", fully_masked_rows="uniform")


def masked_forward(m, x, key_padding=None, causal=None):
    mask = None
    if key_padding is not None:
        mask = torch.as_tensor(key_padding).bool()[:, None, None, :]
    if causal is not None and bool(causal):
        n = x.shape[1]
        tril = torch.ones(n, n, dtype=torch.bool).tril()[None, None]
        mask = tril if mask is None else mask & tril
    return m(x, mask=mask)
SPACE = dict(split_heads=True, relations={})

from tck.adapters import Times

adapter = TorchModuleAdapter("sequential-vit", [
    TorchEntry("patch_embed", make=make_patch, forward=lambda m, images: m(images),
               param_map={"weight": "0.weight", "bias": "0.bias"}, conventions=VIT),
    TorchEntry("encoder_layer", make=make_block, forward=masked_forward, param_map=block_map, conventions=MASKED,
               supports=ConfigSpace(split_heads=True, relations={"d_ff": Times("d_model", 4)})),
    TorchEntry("encoder", make=make_encoder, forward=masked_forward, param_map=encoder_map,
               conventions=Conventions(norm_placement="pre", activation="gelu", final_norm="never", fully_masked_rows="uniform"),
               supports=ConfigSpace(split_heads=True, relations={"d_ff": Times("d_model", 4)})),
    TorchEntry("vit", make=make_vit, forward=lambda m, images: m(images), param_map=vit_map, conventions=VIT,
               supports=ConfigSpace(split_heads=True, relations={"d_ff": Times("d_model", 4)})),
])
