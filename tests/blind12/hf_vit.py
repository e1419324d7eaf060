# fmt: off
# ruff: noqa
"""A ViT as transformers' ``models/vit/modeling_vit.py`` writes it (eager attention), for the
twelfth blind benchmark: ``ViTEmbeddings`` (class token, position embeddings,
``interpolate_pos_encoding``, dropout), ``ViTPatchEmbeddings`` (Conv2d,
``flatten(2).transpose(1, 2)``), ``ViTSelfAttention`` with ``transpose_for_scores``,
``ViTSelfOutput``, ``ViTIntermediate`` (exact GELU), ``ViTOutput`` (the residual inside),
``ViTLayer`` (``layernorm_before``/``layernorm_after``), ``ViTEncoder``, the final
``layernorm``, and ``ViTForImageClassification``'s classifier on the class token (no pooler).
The layer and the encoder take an extended additive attention mask (BERT's
``get_extended_attention_mask``: a key-padding keep-mask and a causal flag). Correct; the bugs
of bugs.json are one-line edits of this file.
"""

import collections.abc
import math
from dataclasses import dataclass

import torch
from torch import nn

from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


@dataclass
class ViTConfig:
    hidden_size: int = 32
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 64
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    layer_norm_eps: float = 1e-12
    image_size: int = 16
    patch_size: int = 4
    num_channels: int = 3
    qkv_bias: bool = True
    num_labels: int = 10


ACT2FN = {"gelu": nn.GELU(), "gelu_new": nn.GELU(approximate="tanh"), "relu": nn.ReLU()}


class ViTEmbeddings(nn.Module):
    """Construct the CLS token, position and patch embeddings."""

    def __init__(self, config):
        super().__init__()
        self.cls_token = nn.Parameter(torch.randn(1, 1, config.hidden_size))
        self.patch_embeddings = ViTPatchEmbeddings(config)
        num_patches = self.patch_embeddings.num_patches
        self.position_embeddings = nn.Parameter(torch.randn(1, num_patches + 1, config.hidden_size))
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.patch_size = config.patch_size
        self.config = config

    def interpolate_pos_encoding(self, embeddings, height, width):
        num_patches = embeddings.shape[1] - 1
        num_positions = self.position_embeddings.shape[1] - 1

        if num_patches == num_positions and height == width:
            return self.position_embeddings

        class_pos_embed = self.position_embeddings[:, :1]
        patch_pos_embed = self.position_embeddings[:, 1:]
        dim = embeddings.shape[-1]
        new_height = height // self.patch_size
        new_width = width // self.patch_size
        sqrt_num_positions = int(num_positions**0.5)
        patch_pos_embed = patch_pos_embed.reshape(1, sqrt_num_positions, sqrt_num_positions, dim)
        patch_pos_embed = patch_pos_embed.permute(0, 3, 1, 2)
        patch_pos_embed = nn.functional.interpolate(
            patch_pos_embed, size=(new_height, new_width), mode="bicubic", align_corners=False,
        )
        patch_pos_embed = patch_pos_embed.permute(0, 2, 3, 1).view(1, -1, dim)
        return torch.cat((class_pos_embed, patch_pos_embed), dim=1)

    def forward(self, pixel_values, interpolate_pos_encoding=False):
        batch_size, num_channels, height, width = pixel_values.shape
        embeddings = self.patch_embeddings(pixel_values, interpolate_pos_encoding=interpolate_pos_encoding)

        # add the [CLS] token to the embedded patch tokens
        cls_tokens = self.cls_token.expand(batch_size, -1, -1)
        embeddings = torch.cat((cls_tokens, embeddings), dim=1)

        # add positional encoding to each token
        if interpolate_pos_encoding:
            embeddings = embeddings + self.interpolate_pos_encoding(embeddings, height, width)
        else:
            embeddings = embeddings + self.position_embeddings

        embeddings = self.dropout(embeddings)
        return embeddings


class ViTPatchEmbeddings(nn.Module):
    """Turns pixel_values [B, C, H, W] into patch embeddings [B, N, D] with a Conv2d."""

    def __init__(self, config):
        super().__init__()
        image_size, patch_size = config.image_size, config.patch_size
        num_channels, hidden_size = config.num_channels, config.hidden_size
        image_size = image_size if isinstance(image_size, collections.abc.Iterable) else (image_size, image_size)
        patch_size = patch_size if isinstance(patch_size, collections.abc.Iterable) else (patch_size, patch_size)
        num_patches = (image_size[1] // patch_size[1]) * (image_size[0] // patch_size[0])
        self.image_size = image_size
        self.patch_size = patch_size
        self.num_channels = num_channels
        self.num_patches = num_patches
        self.projection = nn.Conv2d(num_channels, hidden_size, kernel_size=patch_size, stride=patch_size)

    def forward(self, pixel_values, interpolate_pos_encoding=False):
        batch_size, num_channels, height, width = pixel_values.shape
        if num_channels != self.num_channels:
            raise ValueError(
                "Make sure that the channel dimension of the pixel values match with the one set in the configuration."
                f" Expected {self.num_channels} but got {num_channels}."
            )
        if height % self.patch_size[0] != 0 or width % self.patch_size[1] != 0:
            raise ValueError(f"Input image size ({height}*{width}) is not divisible by the patch size {self.patch_size}.")
        if not interpolate_pos_encoding:
            if height != self.image_size[0] or width != self.image_size[1]:
                raise ValueError(
                    f"Input image size ({height}*{width}) doesn't match model"
                    f" ({self.image_size[0]}*{self.image_size[1]})."
                )
        embeddings = self.projection(pixel_values).flatten(2).transpose(1, 2)
        return embeddings


class ViTSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = int(config.hidden_size / config.num_attention_heads)
        self.all_head_size = self.num_attention_heads * self.attention_head_size

        self.query = nn.Linear(config.hidden_size, self.all_head_size, bias=config.qkv_bias)
        self.key = nn.Linear(config.hidden_size, self.all_head_size, bias=config.qkv_bias)
        self.value = nn.Linear(config.hidden_size, self.all_head_size, bias=config.qkv_bias)

        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None, head_mask=None):
        mixed_query_layer = self.query(hidden_states)

        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        query_layer = self.transpose_for_scores(mixed_query_layer)

        # Take the dot product between "query" and "key" to get the raw attention scores.
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            # the extended mask is 0 where a key may be attended and finfo.min where not
            attention_scores = attention_scores + attention_mask
            attention_scores = torch.clamp(attention_scores, min=torch.finfo(attention_scores.dtype).min)

        # Normalize the attention scores to probabilities.
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)

        # This is actually dropping out entire tokens to attend to, which might
        # seem a bit unusual, but is taken from the original Transformer paper.
        attention_probs = self.dropout(attention_probs)

        # Mask heads if we want to
        if head_mask is not None:
            attention_probs = attention_probs * head_mask

        context_layer = torch.matmul(attention_probs, value_layer)

        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        context_layer = context_layer.view(new_context_layer_shape)
        return context_layer


class ViTSelfOutput(nn.Module):
    """The residual connection is defined in ViTLayer instead of here (as is the case with other
    models), due to the layernorm applied before each block."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states


class ViTAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = ViTSelfAttention(config)
        self.output = ViTSelfOutput(config)

    def forward(self, hidden_states, attention_mask=None, head_mask=None):
        self_outputs = self.attention(hidden_states, attention_mask, head_mask)
        attention_output = self.output(self_outputs, hidden_states)
        return attention_output


class ViTIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden_states):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.intermediate_act_fn(hidden_states)
        return hidden_states


class ViTOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        hidden_states = hidden_states + input_tensor
        return hidden_states


class ViTLayer(nn.Module):
    """This corresponds to the Block class in the timm implementation."""

    def __init__(self, config):
        super().__init__()
        self.attention = ViTAttention(config)
        self.intermediate = ViTIntermediate(config)
        self.output = ViTOutput(config)
        self.layernorm_before = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layernorm_after = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states, attention_mask=None, head_mask=None):
        hidden_states_norm = self.layernorm_before(hidden_states)
        attention_output = self.attention(hidden_states_norm, attention_mask, head_mask)

        # first residual connection
        hidden_states = attention_output + hidden_states

        # in ViT, layernorm is also applied after self-attention
        layer_output = self.layernorm_after(hidden_states)
        layer_output = self.intermediate(layer_output)

        # second residual connection is done here
        layer_output = self.output(layer_output, hidden_states)
        return layer_output


class ViTEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList([ViTLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states, attention_mask=None, head_mask=None):
        for i, layer_module in enumerate(self.layer):
            layer_head_mask = head_mask[i] if head_mask is not None else None
            hidden_states = layer_module(hidden_states, attention_mask, layer_head_mask)
        return hidden_states


def get_extended_attention_mask(attention_mask, input_shape, dtype, causal=False):
    """BERT's ModuleUtilsMixin.get_extended_attention_mask: a keep-mask [B, L] (1 = attend)
    made additive [B, 1, L or 1, L] (0 = attend, finfo.min = masked), causal when asked."""
    batch_size, seq_length = input_shape
    if attention_mask is None:
        attention_mask = torch.ones(batch_size, seq_length, dtype=torch.bool)
    if causal:
        seq_ids = torch.arange(seq_length)
        causal_mask = seq_ids[None, None, :].repeat(batch_size, seq_length, 1) <= seq_ids[None, :, None]
        extended_attention_mask = causal_mask[:, None, :, :] & attention_mask[:, None, None, :]
    else:
        extended_attention_mask = attention_mask[:, None, None, :]
    extended_attention_mask = extended_attention_mask.to(dtype=dtype)  # fp16 compatibility
    extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min
    return extended_attention_mask


class ViTEncoderWithNorm(nn.Module):
    """ViTModel past its embeddings: the encoder and the final layernorm."""

    def __init__(self, config):
        super().__init__()
        self.encoder = ViTEncoder(config)
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states, attention_mask=None):
        encoder_outputs = self.encoder(hidden_states, attention_mask)
        return self.layernorm(encoder_outputs)


class ViTModel(nn.Module):
    def __init__(self, config, add_pooling_layer=False):
        super().__init__()
        self.config = config
        self.embeddings = ViTEmbeddings(config)
        self.encoder = ViTEncoder(config)
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, pixel_values, head_mask=None, interpolate_pos_encoding=False):
        # cast the input to the patch projection's dtype
        expected_dtype = self.embeddings.patch_embeddings.projection.weight.dtype
        if pixel_values.dtype != expected_dtype:
            pixel_values = pixel_values.to(expected_dtype)

        embedding_output = self.embeddings(pixel_values, interpolate_pos_encoding=interpolate_pos_encoding)
        encoder_outputs = self.encoder(embedding_output, head_mask=head_mask)
        sequence_output = encoder_outputs
        sequence_output = self.layernorm(sequence_output)
        return sequence_output


class ViTForImageClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_labels = config.num_labels
        self.vit = ViTModel(config, add_pooling_layer=False)
        # Classifier head
        self.classifier = nn.Linear(config.hidden_size, config.num_labels) if config.num_labels > 0 else nn.Identity()

    def forward(self, pixel_values, interpolate_pos_encoding=False):
        sequence_output = self.vit(pixel_values, interpolate_pos_encoding=interpolate_pos_encoding)
        logits = self.classifier(sequence_output[:, 0, :])
        return logits


# ---- the adapter --------------------------------------------------------------------------


def _vit_config(config):
    return ViTConfig(
        hidden_size=config.d_model, num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
        intermediate_size=config.d_ff, image_size=config.image_size, patch_size=config.patch_size,
        num_channels=config.channels, num_labels=config.n_classes,
    )


def _layer_map(canon, mine):
    names = {
        "self_attn.q": "attention.attention.query", "self_attn.k": "attention.attention.key",
        "self_attn.v": "attention.attention.value", "self_attn.o": "attention.output.dense",
        "norm1": "layernorm_before", "norm2": "layernorm_after",
        "ffn.fc1": "intermediate.dense", "ffn.fc2": "output.dense",
    }
    return {f"{canon}{k}.{p}": f"{mine}{v}.{p}" for k, v in names.items() for p in ("weight", "bias")}


def _encoder_map(config, canon="", mine=""):
    out = {f"{canon}norm.weight": f"{mine}layernorm.weight", f"{canon}norm.bias": f"{mine}layernorm.bias"}
    for i in range(config.n_layers):
        out.update(_layer_map(f"{canon}layers.{i}.", f"{mine}encoder.layer.{i}."))
    return out


def _vit_map(config):
    out = {
        "patch_embed.weight": "vit.embeddings.patch_embeddings.projection.weight",
        "patch_embed.bias": "vit.embeddings.patch_embeddings.projection.bias",
        "cls_token": "vit.embeddings.cls_token", "pos_embed": "vit.embeddings.position_embeddings",
        "head.weight": "classifier.weight", "head.bias": "classifier.bias",
    }
    out.update(_encoder_map(config, "encoder.", "vit."))
    return out


def _masked_forward(module, x, key_padding=None, causal=None):
    mask = None
    if key_padding is not None or (causal is not None and bool(causal)):
        mask = get_extended_attention_mask(key_padding, x.shape[:2], x.dtype, causal=bool(causal))
    return module(x, mask)


LAYER = Conventions(norm_placement="pre", activation="gelu", eps=1e-12, fully_masked_rows="uniform")
VIT = Conventions(norm_placement="pre", activation="gelu", eps=1e-12)
SPACE = ConfigSpace(split_heads=True)

adapter = TorchModuleAdapter("hf-vit", [
    TorchEntry(
        "patch_embed", make=lambda c: ViTPatchEmbeddings(_vit_config(c)),
        forward=lambda m, images: m(images),
        param_map={"weight": "projection.weight", "bias": "projection.bias"},
    ),
    TorchEntry(
        "encoder_layer", make=lambda c: ViTLayer(_vit_config(c)), forward=_masked_forward,
        param_map=_layer_map("", ""), conventions=LAYER, supports=SPACE,
    ),
    TorchEntry(
        "encoder", make=lambda c: ViTEncoderWithNorm(_vit_config(c)), forward=_masked_forward,
        param_map=_encoder_map, conventions=LAYER, supports=SPACE,
    ),
    TorchEntry(
        "vit", make=lambda c: ViTForImageClassification(_vit_config(c)),
        forward=lambda m, images: m(images), param_map=_vit_map, conventions=VIT, supports=SPACE,
    ),
])
