# fmt: off
# ruff: noqa
"""A Vision Transformer written the way torchvision's ``models/vision_transformer.py`` writes it.

``conv_proj`` (a Conv2d of kernel = stride = patch) and ``_process_input`` (``reshape`` to
``(n, hidden_dim, n_h * n_w)`` then ``permute(0, 2, 1)``), a ``class_token`` parameter of
zeros expanded over the batch and concatenated in front, the ``Encoder`` holding the
``pos_embedding`` (added inside the encoder, after the class token), ``EncoderBlock``s with
``ln_1`` / ``ln_2`` built by ``partial(nn.LayerNorm, eps=1e-6)``, ``nn.MultiheadAttention``
(``batch_first=True``, one fused ``in_proj_weight``) called with ``need_weights=False``, an
``MLPBlock`` that is an ``nn.Sequential`` of Linear, GELU, Dropout, Linear, Dropout, the
encoder's final ``ln``, ``x[:, 0]`` and a ``heads`` Sequential with one Linear ``head``.
Dropout rates are set (0.1) as a fine-tuning recipe would; evaluation switches them off.
"""

import math
from collections import OrderedDict
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn


class MLPBlock(nn.Sequential):
    """Transformer MLP block."""

    def __init__(self, in_dim, mlp_dim, dropout):
        super().__init__(
            nn.Linear(in_dim, mlp_dim, bias=True),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(mlp_dim, in_dim, bias=True),
            nn.Dropout(dropout),
        )
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.normal_(m.bias, std=1e-6)


class EncoderBlock(nn.Module):
    """Transformer encoder block."""

    def __init__(self, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout, norm_layer):
        super().__init__()
        self.num_heads = num_heads

        # Attention block
        self.ln_1 = norm_layer(hidden_dim)
        self.self_attention = nn.MultiheadAttention(hidden_dim, num_heads, dropout=attention_dropout, batch_first=True)
        self.dropout = nn.Dropout(dropout)

        # MLP block
        self.ln_2 = norm_layer(hidden_dim)
        self.mlp = MLPBlock(hidden_dim, mlp_dim, dropout)

    def forward(self, input, key_padding_mask=None):
        # key_padding_mask [B, S]: True where a token is padding (nn.MultiheadAttention's polarity)
        torch._assert(input.dim() == 3, f"Expected (batch_size, seq_length, hidden_dim) got {input.shape}")
        x = self.ln_1(input)
        x, _ = self.self_attention(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = self.dropout(x)
        x = x + input

        y = self.ln_2(x)
        y = self.mlp(y)
        return x + y


class Encoder(nn.Module):
    """Transformer Model Encoder for sequence to sequence translation."""

    def __init__(self, seq_length, num_layers, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout, norm_layer):
        super().__init__()
        # Note that batch_size is on the first dim because
        # we have batch_first=True in nn.MultiAttention() by default
        self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, hidden_dim).normal_(std=0.02))  # from BERT
        self.dropout = nn.Dropout(dropout)
        layers = OrderedDict()
        for i in range(num_layers):
            layers[f"encoder_layer_{i}"] = EncoderBlock(
                num_heads, hidden_dim, mlp_dim, dropout, attention_dropout, norm_layer,
            )
        self.layers = nn.Sequential(layers)
        self.ln = norm_layer(hidden_dim)

    def forward(self, input):
        torch._assert(input.dim() == 3, f"Expected (batch_size, seq_length, hidden_dim) got {input.shape}")
        input = input + self.pos_embedding
        return self.ln(self.layers(self.dropout(input)))


class VisionTransformer(nn.Module):
    """Vision Transformer as per https://arxiv.org/abs/2010.11929."""

    def __init__(self, image_size, patch_size, num_layers, num_heads, hidden_dim, mlp_dim,
                 dropout=0.1, attention_dropout=0.1, num_classes=1000, in_channels=3):
        super().__init__()
        torch._assert(image_size % patch_size == 0, "Input shape indivisible by patch size!")
        self.image_size = image_size
        self.patch_size = patch_size
        self.hidden_dim = hidden_dim
        self.mlp_dim = mlp_dim
        self.attention_dropout = attention_dropout
        self.dropout = dropout
        self.num_classes = num_classes
        norm_layer = partial(nn.LayerNorm, eps=1e-6)

        self.conv_proj = nn.Conv2d(in_channels=in_channels, out_channels=hidden_dim, kernel_size=patch_size, stride=patch_size)

        seq_length = (image_size // patch_size) ** 2

        # Add a class token
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        seq_length += 1

        self.encoder = Encoder(
            seq_length, num_layers, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout, norm_layer,
        )
        self.seq_length = seq_length

        heads_layers = OrderedDict()
        heads_layers["head"] = nn.Linear(hidden_dim, num_classes)
        self.heads = nn.Sequential(heads_layers)

        # Init the patchify stem
        fan_in = self.conv_proj.in_channels * self.conv_proj.kernel_size[0] * self.conv_proj.kernel_size[1]
        nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / fan_in))
        nn.init.zeros_(self.conv_proj.bias)

    def _process_input(self, x):
        n, c, h, w = x.shape
        p = self.patch_size
        torch._assert(h == self.image_size, f"Wrong image height! Expected {self.image_size} but got {h}!")
        torch._assert(w == self.image_size, f"Wrong image width! Expected {self.image_size} but got {w}!")
        n_h = h // p
        n_w = w // p

        # (n, c, h, w) -> (n, hidden_dim, n_h, n_w)
        x = self.conv_proj(x)
        # (n, hidden_dim, n_h, n_w) -> (n, hidden_dim, (n_h * n_w))
        x = x.reshape(n, self.hidden_dim, n_h * n_w)

        # (n, hidden_dim, (n_h * n_w)) -> (n, (n_h * n_w), hidden_dim)
        # The self attention layer expects inputs in the format (N, S, E)
        # where S is the source sequence length, N is the batch size, E is the
        # embedding dimension
        x = x.permute(0, 2, 1)

        return x

    def forward(self, x):
        # Reshape and permute the input tensor
        x = self._process_input(x)
        n = x.shape[0]

        # Expand the class token to the full batch
        batch_class_token = self.class_token.expand(n, -1, -1)
        x = torch.cat([batch_class_token, x], dim=1)

        x = self.encoder(x)

        # Classifier "token" as used by standard language architectures
        x = x[:, 0]

        x = self.heads(x)

        return x


class PatchEmbedOnly(nn.Module):
    """The patch_embed subject: the model's conv_proj and _process_input."""

    def __init__(self, vit):
        super().__init__()
        self.vit = vit

    def forward(self, images):
        c = images.shape[1]
        torch._assert(c == self.vit.conv_proj.in_channels, f"Expected {self.vit.conv_proj.in_channels} channels, got {c}")
        torch._assert(images.shape[-1] % self.vit.patch_size == 0 and images.shape[-2] % self.vit.patch_size == 0, "indivisible")
        n, _, h, w = images.shape
        x = self.vit.conv_proj(images)
        return x.reshape(n, self.vit.hidden_dim, (h // self.vit.patch_size) * (w // self.vit.patch_size)).permute(0, 2, 1)


# ---- the adapter ------------------------------------------------------------------------
from tck.adapters import Chunk, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def build_vit(config):
    return VisionTransformer(
        image_size=config.image_size, patch_size=config.patch_size, num_layers=config.n_layers,
        num_heads=config.n_heads, hidden_dim=config.d_model, mlp_dim=config.d_ff,
        num_classes=config.n_classes, in_channels=config.channels,
    )


def block_map(canon, ours):
    m = {}
    for i, c in enumerate("qkv"):
        m[f"{canon}self_attn.{c}.weight"] = Chunk(f"{ours}self_attention.in_proj_weight", i, 3)
        m[f"{canon}self_attn.{c}.bias"] = Chunk(f"{ours}self_attention.in_proj_bias", i, 3)
    for p in ("weight", "bias"):
        m[f"{canon}self_attn.o.{p}"] = f"{ours}self_attention.out_proj.{p}"
        m[f"{canon}norm1.{p}"] = f"{ours}ln_1.{p}"
        m[f"{canon}norm2.{p}"] = f"{ours}ln_2.{p}"
        m[f"{canon}ffn.fc1.{p}"] = f"{ours}mlp.0.{p}"
        m[f"{canon}ffn.fc2.{p}"] = f"{ours}mlp.3.{p}"
    return m


def vit_map(config):
    m = {
        "patch_embed.weight": "conv_proj.weight",
        "patch_embed.bias": "conv_proj.bias",
        "cls_token": "class_token",
        "pos_embed": "encoder.pos_embedding",
        "encoder.norm.weight": "encoder.ln.weight",
        "encoder.norm.bias": "encoder.ln.bias",
        "head.weight": "heads.head.weight",
        "head.bias": "heads.head.bias",
    }
    for i in range(config.n_layers):
        m |= block_map(f"encoder.layers.{i}.", f"encoder.layers.encoder_layer_{i}.")
    return m


_VIT = dict(norm_placement="pre", activation="gelu", eps=1e-6)

adapter = TorchModuleAdapter("torchvision-vit", [
    TorchEntry(
        "patch_embed",
        make=lambda config: PatchEmbedOnly(build_vit(config)),
        forward=lambda module, images: module(images),
        param_map={"weight": "vit.conv_proj.weight", "bias": "vit.conv_proj.bias"},
        holds=lambda module: module.vit.conv_proj,
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: EncoderBlock(
            config.n_heads, config.d_model, config.d_ff, 0.1, 0.1, partial(nn.LayerNorm, eps=1e-6)
        ),
        # key_padding arrives as a keep-mask (True = a real token); nn.MultiheadAttention's
        # key_padding_mask is True where a token is padding
        forward=lambda module, x, key_padding=None: module(x, None if key_padding is None else ~key_padding),
        param_map=block_map("", ""),
        # nn.MultiheadAttention returns NaN for a query whose keys are all padding
        conventions=Conventions(**_VIT, fully_masked_rows="nan"),
    ),
    TorchEntry(
        "vit",
        make=build_vit,
        forward=lambda module, images: module(images),
        param_map=vit_map,
        conventions=Conventions(**_VIT),
    ),
])
