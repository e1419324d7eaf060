# fmt: off
# ruff: noqa
"""A Vision Transformer ported from the Keras example ("Image classification with Vision
Transformer") to PyTorch, keeping Keras' layouts: channels-last NHWC images, a ``Conv2D``
patch embedding whose kernel is stored HWIO [p, p, C, D] (permuted to torch's OIHW for
``F.conv2d`` on the image permuted to NCHW, the output permuted back to NHWC and reshaped
``Reshape((-1, D))``), ``Dense`` layers with kernels stored [in, out] (``x @ kernel``), a
``LayerNormalization(epsilon=1e-6)`` before each sublayer, ``layers.Add()`` residuals, the
attention core a time-first ``nn.MultiheadAttention(batch_first=False)`` fed transposed
tensors, exact GELU, a class token prepended (kept for checkpoint compatibility) and a
``GlobalAveragePooling1D`` over the patch tokens after the final norm.

Written for the sixth blind benchmark (tests/blind6); correct as written.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


class Dense(nn.Module):
    """keras.layers.Dense: kernel [in, out], y = activation(x @ kernel + bias)."""

    def __init__(self, input_dim, units, activation=None):
        super().__init__()
        self.kernel = nn.Parameter(torch.empty(input_dim, units))
        self.bias = nn.Parameter(torch.zeros(units))
        self.activation = activation
        limit = math.sqrt(6.0 / (input_dim + units))  # glorot_uniform
        nn.init.uniform_(self.kernel, -limit, limit)

    def forward(self, inputs):
        outputs = torch.matmul(inputs, self.kernel) + self.bias
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs


def gelu(x):
    return F.gelu(x)  # keras.activations.gelu(x, approximate=False)


class Patches(nn.Module):
    """Conv2D(D, kernel_size=p, strides=p, padding='valid') on NHWC images, then Reshape."""

    def __init__(self, patch_size, channels, projection_dim):
        super().__init__()
        self.patch_size = patch_size
        self.kernel = nn.Parameter(torch.empty(patch_size, patch_size, channels, projection_dim))  # HWIO
        self.bias = nn.Parameter(torch.zeros(projection_dim))
        nn.init.xavier_uniform_(self.kernel)

    def forward(self, images):  # images: [B, H, W, C]
        batch, height, width, channels = images.shape
        if height % self.patch_size or width % self.patch_size:
            raise ValueError(f"image {height}x{width} is not a multiple of the patch size {self.patch_size}")
        x = images.permute(0, 3, 1, 2)  # NHWC -> NCHW for torch's conv
        w = self.kernel.permute(3, 2, 0, 1)  # HWIO -> OIHW
        x = F.conv2d(x, w, self.bias, stride=self.patch_size)  # [B, D, h, w]
        x = x.permute(0, 2, 3, 1)  # back to channels-last: [B, h, w, D]
        return x.reshape(batch, -1, x.shape[-1])  # Reshape((-1, D)): the grid row-major


class TransformerBlock(nn.Module):
    def __init__(self, projection_dim, num_heads, transformer_units, dropout_rate=0.1):
        super().__init__()
        self.norm1 = nn.LayerNorm(projection_dim, eps=1e-6)
        self.attn = nn.MultiheadAttention(projection_dim, num_heads, dropout=dropout_rate, batch_first=False)
        self.norm2 = nn.LayerNorm(projection_dim, eps=1e-6)
        self.dense1 = Dense(projection_dim, transformer_units, activation=gelu)
        self.dense2 = Dense(transformer_units, projection_dim)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, encoded_patches, padding_mask=None, attention_mask=None):
        """padding_mask [B, N]: True = pad (torch's key_padding_mask); attention_mask [N, N]: True = hidden."""
        x1 = self.norm1(encoded_patches)
        x1_t = x1.transpose(0, 1)  # [N, B, D]: the attention is time-first
        attention_output, _ = self.attn(x1_t, x1_t, x1_t, key_padding_mask=padding_mask, attn_mask=attention_mask, need_weights=False)
        x2 = attention_output.transpose(0, 1) + encoded_patches  # layers.Add()
        x3 = self.norm2(x2)
        x3 = self.dropout(self.dense1(x3))
        x3 = self.dropout(self.dense2(x3))
        return x3 + x2  # layers.Add()


class VisionTransformer(nn.Module):
    def __init__(self, image_size, patch_size, channels, projection_dim, num_heads, transformer_units, transformer_layers, num_classes):
        super().__init__()
        num_patches = (image_size // patch_size) ** 2
        self.patches = Patches(patch_size, channels, projection_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, projection_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, projection_dim) * 0.02)
        self.blocks = nn.ModuleList([TransformerBlock(projection_dim, num_heads, transformer_units) for _ in range(transformer_layers)])
        self.layernorm = nn.LayerNorm(projection_dim, eps=1e-6)
        self.head = Dense(projection_dim, num_classes)

    def forward(self, images):  # images: [B, H, W, C]
        encoded_patches = self.patches(images)
        cls = self.cls_token.expand(encoded_patches.shape[0], -1, -1)  # tf.broadcast_to
        encoded_patches = torch.cat([cls, encoded_patches], dim=1)
        encoded_patches = encoded_patches + self.pos_embed
        for block in self.blocks:
            encoded_patches = block(encoded_patches)
        representation = self.layernorm(encoded_patches)
        representation = representation[:, 1:].mean(dim=1)  # GlobalAveragePooling1D over the patches
        return self.head(representation)


# ---- the adapter: NCHW numpy at the boundary, channels-last inside
from tck.adapters import Chunk, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def _block_map(mine, canon):
    out = {f"{canon}self_attn.{n}.weight": Chunk(f"{mine}attn.in_proj_weight", i, 3) for i, n in enumerate("qkv")}
    out |= {f"{canon}self_attn.{n}.bias": Chunk(f"{mine}attn.in_proj_bias", i, 3) for i, n in enumerate("qkv")}
    out |= {f"{canon}self_attn.o.{p}": f"{mine}attn.out_proj.{p}" for p in ("weight", "bias")}
    out |= {f"{canon}norm1.{p}": f"{mine}norm1.{p}" for p in ("weight", "bias")}
    out |= {f"{canon}norm2.{p}": f"{mine}norm2.{p}" for p in ("weight", "bias")}
    out |= {f"{canon}ffn.fc1.weight": Param(f"{mine}dense1.kernel", permute=(1, 0)), f"{canon}ffn.fc1.bias": f"{mine}dense1.bias"}
    out |= {f"{canon}ffn.fc2.weight": Param(f"{mine}dense2.kernel", permute=(1, 0)), f"{canon}ffn.fc2.bias": f"{mine}dense2.bias"}
    return out


def _vit_map(config):
    out = {"patch_embed.weight": Param("patches.kernel", permute=(3, 2, 0, 1)), "patch_embed.bias": "patches.bias"}
    out |= {"cls_token": "cls_token", "pos_embed": "pos_embed"}
    for i in range(config.n_layers):
        out |= _block_map(f"blocks.{i}.", f"encoder.layers.{i}.")
    out |= {f"encoder.norm.{p}": f"layernorm.{p}" for p in ("weight", "bias")}
    out |= {"head.weight": Param("head.kernel", permute=(1, 0)), "head.bias": "head.bias"}
    return out


def _vit(config):
    return VisionTransformer(config.image_size, config.patch_size, config.channels, config.d_model, config.n_heads, config.d_ff, config.n_layers, config.n_classes)


CONVENTIONS = Conventions(norm_placement="pre", activation="gelu", eps=1e-6, pooling="mean")
def _layer_forward(m, x, key_padding=None, causal=None):
    pad = None if key_padding is None else ~key_padding.bool()
    hidden = None
    if causal is not None and bool(causal):
        hidden = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).triu(1)
    return m(x, padding_mask=pad, attention_mask=hidden)


NHWC = lambda images: images.permute(0, 2, 3, 1)  # the loader's NCHW -> Keras' NHWC

adapter = TorchModuleAdapter("keras-vit", [
    TorchEntry("patch_embed", make=lambda config: Patches(config.patch_size, config.channels, config.d_model), forward=lambda m, images: m(NHWC(images)), param_map={"weight": Param("kernel", permute=(3, 2, 0, 1)), "bias": "bias"}, conventions=CONVENTIONS),
    TorchEntry("encoder_layer", make=lambda config: TransformerBlock(config.d_model, config.n_heads, config.d_ff), forward=_layer_forward, param_map=_block_map("", ""), conventions=CONVENTIONS),
    TorchEntry("vit", make=_vit, forward=lambda m, images: m(NHWC(images)), param_map=_vit_map, conventions=CONVENTIONS),
])
