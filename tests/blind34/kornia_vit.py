# fmt: off
# ruff: noqa
"""A Vision Transformer as kornia.contrib's vit.py writes it (kornia 0.6/0.7): nn.Sequential
blocks, ResidualAdd wrappers, a fused qkv reshaped and permuted to (3, B, H, N, d), a
PatchEmbedding that owns the class token and the position table, and a classification head
on the class token."""
from typing import Any, List, Optional, Tuple

import torch
from torch import nn

Tensor = torch.Tensor
Module = nn.Module


def KORNIA_CHECK(condition: bool, msg: Optional[str] = None) -> None:
    if not condition:
        raise Exception(f"{condition} not true.\n{msg}")


__all__ = ["VisionTransformer"]


# recreated from https://towardsdatascience.com/implementing-visualttransformer-in-pytorch-184f9f16f632
class ResidualAdd(Module):
    def __init__(self, fn: Module) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: Tensor, **kwargs: Any) -> Tensor:
        res = x
        x = self.fn(x, **kwargs)
        x += res
        return x


class FeedForward(nn.Sequential):
    def __init__(self, in_features: int, hidden_features: int, out_features: int, dropout_rate: float = 0.0) -> None:
        super().__init__(
            nn.Linear(in_features, hidden_features),
            nn.GELU(),
            nn.Dropout(dropout_rate),
            nn.Linear(hidden_features, out_features),
            nn.Dropout(dropout_rate),  # added one extra as in timm
        )


class MultiHeadAttention(Module):
    def __init__(self, emb_size: int, num_heads: int, att_drop: float, proj_drop: float) -> None:
        super().__init__()
        self.emb_size = emb_size
        self.num_heads = num_heads
        head_size = emb_size // num_heads  # from timm
        self.scale = head_size**-0.5  # from timm

        KORNIA_CHECK(head_size * num_heads == emb_size, "Size of embedding inside the transformer decoder must be visible by number of heads")

        # fuse the queries, keys and values in one matrix
        self.qkv = nn.Linear(emb_size, emb_size * 3, bias=False)
        self.att_drop = nn.Dropout(att_drop)
        self.projection = nn.Linear(emb_size, emb_size)
        self.projection_drop = nn.Dropout(proj_drop)  # added timm trick
        self.attn_mask: Optional[Tensor] = None  # not in kornia: a keep-mask (B, N, N) the kit's glue sets

    def forward(self, x: Tensor) -> Tensor:
        B, N, C = x.shape
        # split keys, queries and values in num_heads
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]

        # sum up over the last axis
        att = torch.einsum("bhqd, bhkd -> bhqk", q, k) * self.scale
        if self.attn_mask is not None:  # not in kornia
            att = att.masked_fill(~self.attn_mask[:, None], torch.finfo(att.dtype).min)
        att = att.softmax(dim=-1)
        att = self.att_drop(att)

        # sum up over the third axis
        out = torch.einsum("bhal, bhlv -> bhav ", att, v)
        out = out.permute(0, 2, 1, 3).contiguous().view(B, N, -1)
        out = self.projection(out)
        out = self.projection_drop(out)
        return out


class TransformerEncoderBlock(nn.Sequential):
    def __init__(self, embed_dim: int, num_heads: int, dropout_rate: float, dropout_attn: float, mlp_dim: Optional[int] = None) -> None:
        mlp_dim = mlp_dim or embed_dim
        super().__init__(
            ResidualAdd(
                nn.Sequential(
                    nn.LayerNorm(embed_dim, 1e-6),
                    MultiHeadAttention(embed_dim, num_heads, dropout_attn, dropout_rate),
                    nn.Dropout(dropout_rate),
                )
            ),
            ResidualAdd(
                nn.Sequential(
                    nn.LayerNorm(embed_dim, 1e-6),
                    FeedForward(embed_dim, mlp_dim, embed_dim, dropout_rate=dropout_rate),
                    nn.Dropout(dropout_rate),
                )
            ),
        )


class TransformerEncoder(Module):
    def __init__(self, embed_dim: int = 768, depth: int = 12, num_heads: int = 12, dropout_rate: float = 0.0, dropout_attn: float = 0.0, mlp_dim: Optional[int] = None) -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            *(TransformerEncoderBlock(embed_dim, num_heads, dropout_rate, dropout_attn, mlp_dim) for _ in range(depth))
        )
        self.results: List[Tensor] = []

    def forward(self, x: Tensor) -> Tensor:
        self.results = []
        out = x
        for m in self.blocks.children():
            out = m(out)
            self.results.append(out)
        return out


class PatchEmbedding(Module):
    """Compute the 2d image patch embedding ready to pass to transformer encoder."""

    def __init__(self, in_channels: int = 3, out_channels: int = 768, patch_size: int = 16, image_size: int = 224, backbone: Optional[Module] = None) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.patch_size = patch_size
        self.image_size = image_size

        # logic needed in case a backbone is passed
        self.backbone = backbone or nn.Conv2d(in_channels, out_channels, kernel_size=patch_size, stride=patch_size)
        if backbone is not None:
            out_channels, feat_size = self._compute_feats_dims((in_channels, image_size, image_size))
            self.out_channels = out_channels
        else:
            feat_size = (image_size // patch_size) ** 2

        self.cls_token = nn.Parameter(torch.randn(1, 1, out_channels))
        self.positions = nn.Parameter(torch.randn(feat_size + 1, out_channels))

    def _compute_feats_dims(self, image_size: Tuple[int, int, int]) -> Tuple[int, int]:
        out = self.backbone(torch.zeros(1, *image_size)).detach()
        return out.shape[-3], out.shape[-2] * out.shape[-1]

    def forward(self, x: Tensor) -> Tensor:
        # not in kornia: the image size is checked (the position table has one row per patch)
        KORNIA_CHECK(x.dim() == 4 and tuple(x.shape[-2:]) == (self.image_size, self.image_size), f"Input image size {tuple(x.shape[-2:])} does not match {self.image_size}.")
        x = self.backbone(x)
        B, N, _, _ = x.shape
        x = x.view(B, N, -1).permute(0, 2, 1)  # BxNxE
        cls_tokens = self.cls_token.repeat(B, 1, 1)  # Bx1xE
        # prepend the cls token to the input
        x = torch.cat([cls_tokens, x], dim=1)  # Bx(N+1)xE
        # add position embedding
        x += self.positions
        return x


class VisionTransformer(Module):
    """Vision transformer (ViT) module.

    The module is expected to be used as operator for different vision tasks.

    The method is inspired from existing implementations of the paper :cite:`dosovitskiy2020vit`.

    .. warning::
        This is an experimental API subject to changes in favor of flexibility.

    Args:
        image_size: the size of the input image.
        patch_size: the size of the patch to compute the embedding.
        in_channels: the number of channels for the input.
        embed_dim: the embedding dimension inside the transformer encoder.
        depth: the depth of the transformer.
        num_heads: the number of attention heads.
        dropout_rate: dropout rate.
        dropout_attn: attention dropout rate.
        backbone: an nn.Module to compute the image patches embeddings.

    Example:
        >>> img = torch.rand(1, 3, 224, 224)
        >>> vit = VisionTransformer(image_size=224, patch_size=16)
        >>> vit(img).shape
        torch.Size([1, 197, 768])
    """

    def __init__(self, image_size: int = 224, patch_size: int = 16, in_channels: int = 3, embed_dim: int = 768, depth: int = 12, num_heads: int = 12, dropout_rate: float = 0.0, dropout_attn: float = 0.0, backbone: Optional[Module] = None, mlp_dim: Optional[int] = None) -> None:
        super().__init__()
        self.image_size = image_size
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.embed_size = embed_dim

        self.patch_embedding = PatchEmbedding(in_channels, embed_dim, patch_size, image_size, backbone)
        hidden_dim = self.patch_embedding.out_channels
        self.encoder = TransformerEncoder(hidden_dim, depth, num_heads, dropout_rate, dropout_attn, mlp_dim)
        self.norm = nn.LayerNorm(hidden_dim, 1e-6)

    @property
    def encoder_results(self) -> List[Tensor]:
        return self.encoder.results

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor):
            raise TypeError(f"Input x type is not a Tensor. Got: {type(x)}")

        if self.image_size not in (*x.shape[-2:],) and x.shape[-3] != self.in_channels:
            raise ValueError(f"Input image shape must be Bx{self.in_channels}x{self.image_size}x{self.image_size}. Got: {x.shape}")

        out = self.patch_embedding(x)
        out = self.encoder(out)
        out = self.norm(out)
        return out


class ClassificationHead(Module):
    """Module to be used as a classification head.

    Args:
        embed_size: the logits tensor coming from the networks.
        num_classes: an integer representing the numbers of classes to classify.

    Example:
        >>> feat = torch.rand(1, 256, 256)
        >>> head = ClassificationHead(256, 10)
        >>> head(feat).shape
        torch.Size([1, 10])
    """

    def __init__(self, embed_size: int = 768, num_classes: int = 10) -> None:
        super().__init__()
        # the normalisation is the backbone's self.norm here (kornia's head normalises once more)
        self.linear = nn.Linear(embed_size, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        out = self.linear(x[:, 0])
        return out


# ---------------------------------------------------------------- the kit's adapter (not kornia's)
from tck.adapters import Param, TorchEntry, TorchModuleAdapter, ConfigSpace, Times
from tck.reference import Conventions


def _make_vit(config):
    return nn.Sequential(
        VisionTransformer(image_size=config.image_size, patch_size=config.patch_size, in_channels=config.channels, embed_dim=config.d_model, depth=config.n_layers, num_heads=config.n_heads, dropout_rate=0.1, dropout_attn=0.1, mlp_dim=config.d_ff),
        ClassificationHead(config.d_model, config.n_classes),
    )


class _Encoder(Module):  # glue: the blocks and the backbone's final norm, a pre-LN stack
    def __init__(self, config):
        super().__init__()
        self.encoder = TransformerEncoder(config.d_model, config.n_layers, config.n_heads, 0.1, 0.1, config.d_ff)
        self.norm = nn.LayerNorm(config.d_model, 1e-6)

    def forward(self, x):
        return self.norm(self.encoder(x))


def _masked_call(module, x, key_padding=None, causal=None):
    B, L, _ = x.shape
    keep = torch.ones(B, L, L, dtype=torch.bool, device=x.device)
    if key_padding is not None:
        keep = keep & key_padding.to(torch.bool)[:, None, :]
    if causal is not None and bool(causal):
        keep = keep & torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    attns = [m for m in module.modules() if isinstance(m, MultiHeadAttention)]
    for m in attns:
        m.attn_mask = keep
    try:
        return module(x)
    finally:
        for m in attns:
            m.attn_mask = None


def _block_map(canon, mine, D):
    attn = f"{mine}0.fn.1."
    ffn = f"{mine}1.fn.1."
    return {
        f"{canon}self_attn.q.weight": Param(f"{attn}qkv.weight", slice=(0, 0, D)),
        f"{canon}self_attn.k.weight": Param(f"{attn}qkv.weight", slice=(0, D, 2 * D)),
        f"{canon}self_attn.v.weight": Param(f"{attn}qkv.weight", slice=(0, 2 * D, 3 * D)),
        f"{canon}self_attn.o.weight": f"{attn}projection.weight",
        f"{canon}self_attn.o.bias": f"{attn}projection.bias",
        f"{canon}norm1.weight": f"{mine}0.fn.0.weight",
        f"{canon}norm1.bias": f"{mine}0.fn.0.bias",
        f"{canon}norm2.weight": f"{mine}1.fn.0.weight",
        f"{canon}norm2.bias": f"{mine}1.fn.0.bias",
        f"{canon}ffn.fc1.weight": f"{ffn}0.weight",
        f"{canon}ffn.fc1.bias": f"{ffn}0.bias",
        f"{canon}ffn.fc2.weight": f"{ffn}3.weight",
        f"{canon}ffn.fc2.bias": f"{ffn}3.bias",
    }


def _encoder_map(canon, mine, config):
    m = {f"{canon}norm.weight": f"{mine}norm.weight", f"{canon}norm.bias": f"{mine}norm.bias"}
    for i in range(config.n_layers):
        m |= _block_map(f"{canon}layers.{i}.", f"{mine}encoder.blocks.{i}.", config.d_model)
    return m


def _vit_map(config):
    n = (config.image_size // config.patch_size) ** 2
    m = _encoder_map("encoder.", "0.", config)
    m |= {
        "patch_embed.weight": "0.patch_embedding.backbone.weight",
        "patch_embed.bias": "0.patch_embedding.backbone.bias",
        "cls_token": "0.patch_embedding.cls_token",
        "pos_embed": Param("0.patch_embedding.positions", shape=(1, n + 1, config.d_model)),
        "head.weight": "1.linear.weight",
        "head.bias": "1.linear.bias",
    }
    return m


CONVENTIONS = Conventions(norm_placement="pre", activation="gelu", eps=1e-6)
LAYER_CONVENTIONS = Conventions(norm_placement="pre", activation="gelu", eps=1e-6, fully_masked_rows="uniform")
BIASES = {"attention_bias": False, "attention_out_bias": True, "ffn_bias": True}
SPACE = ConfigSpace(split_heads=True, biases={"attention": False, "attention_out": True, "ffn": True})

adapter = TorchModuleAdapter("kornia-vit", [
    TorchEntry("encoder_layer", make=lambda c: TransformerEncoderBlock(c.d_model, c.n_heads, 0.1, 0.1, c.d_ff), forward=_masked_call, param_map=lambda c: _block_map("", "", c.d_model), conventions=LAYER_CONVENTIONS, config=BIASES, supports=SPACE),
    TorchEntry("encoder", make=_Encoder, forward=_masked_call, param_map=lambda c: _encoder_map("", "", c), conventions=LAYER_CONVENTIONS, config=BIASES, supports=SPACE),
    TorchEntry("vit", make=_make_vit, forward=lambda m, images: m(images), param_map=_vit_map, conventions=CONVENTIONS, config=BIASES, supports=SPACE),
])
