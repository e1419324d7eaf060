# fmt: off
# ruff: noqa
"""DeiT as transformers' ``modeling_deit.py`` (4.3x, eager attention) writes it, for the
class-token-only checkpoints (``facebook/deit-*-patch16-224``, ``DeiTForImageClassification``:
no distillation token, the classifier reads the class token after the final ``layernorm``);
then the kit's adapter (the glue at the end of the file). Blind set 31, written for this
benchmark."""

import collections.abc
import math
from typing import Optional, Set, Tuple, Union

import torch
import torch.utils.checkpoint
from torch import nn


class GELUActivation(nn.Module):
    """
    Original Implementation of the GELU activation function in Google BERT repo when initially created.
    """

    def __init__(self, use_gelu_python: bool = False):
        super().__init__()
        self.act = nn.functional.gelu

    def forward(self, input):
        return self.act(input)


ACT2FN = {"gelu": GELUActivation}


class DeiTConfig:
    model_type = "deit"

    def __init__(self, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                 hidden_act="gelu", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.02,
                 layer_norm_eps=1e-12, image_size=224, patch_size=16, num_channels=3, qkv_bias=True,
                 encoder_stride=16, num_labels=1000):
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.image_size = image_size
        self.patch_size = patch_size
        self.num_channels = num_channels
        self.qkv_bias = qkv_bias
        self.encoder_stride = encoder_stride
        self.num_labels = num_labels


class DeiTPatchEmbeddings(nn.Module):
    """
    This class turns `pixel_values` of shape `(batch_size, num_channels, height, width)` into the initial
    `hidden_states` (patch embeddings) of shape `(batch_size, seq_length, hidden_size)` to be consumed by a
    Transformer.
    """

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

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        batch_size, num_channels, height, width = pixel_values.shape
        if num_channels != self.num_channels:
            raise ValueError(
                "Make sure that the channel dimension of the pixel values match with the one set in the configuration."
            )
        if height != self.image_size[0] or width != self.image_size[1]:
            raise ValueError(
                f"Input image size ({height}*{width}) doesn't match model ({self.image_size[0]}*{self.image_size[1]})."
            )
        x = self.projection(pixel_values).flatten(2).transpose(1, 2)
        return x


class DeiTEmbeddings(nn.Module):
    """
    Construct the CLS token, distillation token, position and patch embeddings. Optionally, also the mask token.
    (Here the class-token-only variant: no distillation token.)
    """

    def __init__(self, config: DeiTConfig) -> None:
        super().__init__()

        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.patch_embeddings = DeiTPatchEmbeddings(config)
        num_patches = self.patch_embeddings.num_patches
        self.position_embeddings = nn.Parameter(torch.zeros(1, num_patches + 1, config.hidden_size))
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        embeddings = self.patch_embeddings(pixel_values)
        batch_size, seq_length, _ = embeddings.size()

        cls_tokens = self.cls_token.expand(batch_size, -1, -1)
        embeddings = torch.cat((cls_tokens, embeddings), dim=1)
        embeddings = embeddings + self.position_embeddings
        embeddings = self.dropout(embeddings)
        return embeddings


class DeiTSelfAttention(nn.Module):
    def __init__(self, config: DeiTConfig) -> None:
        super().__init__()
        if config.hidden_size % config.num_attention_heads != 0:
            raise ValueError(
                f"The hidden size {config.hidden_size,} is not a multiple of the number of attention "
                f"heads {config.num_attention_heads}."
            )

        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = int(config.hidden_size / config.num_attention_heads)
        self.all_head_size = self.num_attention_heads * self.attention_head_size

        self.query = nn.Linear(config.hidden_size, self.all_head_size, bias=config.qkv_bias)
        self.key = nn.Linear(config.hidden_size, self.all_head_size, bias=config.qkv_bias)
        self.value = nn.Linear(config.hidden_size, self.all_head_size, bias=config.qkv_bias)

        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(
        self, hidden_states, head_mask: Optional[torch.Tensor] = None, output_attentions: bool = False,
        attention_mask: Optional[torch.Tensor] = None,
    ) -> Union[Tuple[torch.Tensor, torch.Tensor], Tuple[torch.Tensor]]:
        mixed_query_layer = self.query(hidden_states)

        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        query_layer = self.transpose_for_scores(mixed_query_layer)

        # Take the dot product between "query" and "key" to get the raw attention scores.
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))

        attention_scores = attention_scores / math.sqrt(self.attention_head_size)

        if attention_mask is not None:
            # Apply the (extended, additive) attention mask, as BertSelfAttention does
            attention_scores = attention_scores + attention_mask

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

        outputs = (context_layer, attention_probs) if output_attentions else (context_layer,)

        return outputs


class DeiTSelfOutput(nn.Module):
    """
    The residual connection is defined in DeiTLayer instead of here (as is the case with other models), due to the
    layernorm applied before each block.
    """

    def __init__(self, config: DeiTConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)

        return hidden_states


class DeiTAttention(nn.Module):
    def __init__(self, config: DeiTConfig) -> None:
        super().__init__()
        self.attention = DeiTSelfAttention(config)
        self.output = DeiTSelfOutput(config)
        self.pruned_heads = set()

    def forward(self, hidden_states, head_mask=None, output_attentions=False, attention_mask=None):
        self_outputs = self.attention(hidden_states, head_mask, output_attentions, attention_mask)

        attention_output = self.output(self_outputs[0], hidden_states)

        outputs = (attention_output,) + self_outputs[1:]  # add attentions if we output them
        return outputs


class DeiTIntermediate(nn.Module):
    def __init__(self, config: DeiTConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        if isinstance(config.hidden_act, str):
            self.intermediate_act_fn = ACT2FN[config.hidden_act]()
        else:
            self.intermediate_act_fn = config.hidden_act

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dense(hidden_states)
        hidden_states = self.intermediate_act_fn(hidden_states)

        return hidden_states


class DeiTOutput(nn.Module):
    def __init__(self, config: DeiTConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)

        hidden_states = hidden_states + input_tensor

        return hidden_states


class DeiTLayer(nn.Module):
    """This corresponds to the Block class in the timm implementation."""

    def __init__(self, config: DeiTConfig) -> None:
        super().__init__()
        self.chunk_size_feed_forward = 0
        self.seq_len_dim = 1
        self.attention = DeiTAttention(config)
        self.intermediate = DeiTIntermediate(config)
        self.output = DeiTOutput(config)
        self.layernorm_before = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layernorm_after = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states, head_mask=None, output_attentions=False, attention_mask=None):
        self_attention_outputs = self.attention(
            self.layernorm_before(hidden_states),  # in DeiT, layernorm is applied before self-attention
            head_mask,
            output_attentions=output_attentions,
            attention_mask=attention_mask,
        )
        attention_output = self_attention_outputs[0]
        outputs = self_attention_outputs[1:]  # add self attentions if we output attention weights

        # first residual connection
        hidden_states = attention_output + hidden_states

        # in DeiT, layernorm is also applied after self-attention
        layer_output = self.layernorm_after(hidden_states)
        layer_output = self.intermediate(layer_output)

        # second residual connection is done here
        layer_output = self.output(layer_output, hidden_states)

        outputs = (layer_output,) + outputs

        return outputs


class DeiTEncoder(nn.Module):
    def __init__(self, config: DeiTConfig) -> None:
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList([DeiTLayer(config) for _ in range(config.num_hidden_layers)])
        self.gradient_checkpointing = False

    def forward(self, hidden_states, head_mask=None, output_attentions=False, output_hidden_states=False, attention_mask=None):
        all_hidden_states = () if output_hidden_states else None
        all_self_attentions = () if output_attentions else None

        for i, layer_module in enumerate(self.layer):
            if output_hidden_states:
                all_hidden_states = all_hidden_states + (hidden_states,)

            layer_head_mask = head_mask[i] if head_mask is not None else None

            layer_outputs = layer_module(hidden_states, layer_head_mask, output_attentions, attention_mask)

            hidden_states = layer_outputs[0]

            if output_attentions:
                all_self_attentions = all_self_attentions + (layer_outputs[1],)

        if output_hidden_states:
            all_hidden_states = all_hidden_states + (hidden_states,)

        return tuple(v for v in [hidden_states, all_hidden_states, all_self_attentions] if v is not None)


class DeiTModel(nn.Module):
    def __init__(self, config: DeiTConfig, add_pooling_layer: bool = False) -> None:
        super().__init__()
        self.config = config

        self.embeddings = DeiTEmbeddings(config)
        self.encoder = DeiTEncoder(config)

        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, pixel_values=None, head_mask=None, output_attentions=None, output_hidden_states=None):
        if pixel_values is None:
            raise ValueError("You have to specify pixel_values")

        # TODO: maybe have a cleaner way to cast the input (from `ImageProcessor` side?)
        expected_dtype = self.embeddings.patch_embeddings.projection.weight.dtype
        if pixel_values.dtype != expected_dtype:
            pixel_values = pixel_values.to(expected_dtype)

        embedding_output = self.embeddings(pixel_values)

        encoder_outputs = self.encoder(
            embedding_output,
            head_mask=head_mask,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        sequence_output = encoder_outputs[0]
        sequence_output = self.layernorm(sequence_output)

        head_outputs = (sequence_output,)
        return head_outputs + encoder_outputs[1:]


class DeiTForImageClassification(nn.Module):
    def __init__(self, config: DeiTConfig) -> None:
        super().__init__()

        self.num_labels = config.num_labels
        self.deit = DeiTModel(config, add_pooling_layer=False)

        # Classifier head
        self.classifier = nn.Linear(config.hidden_size, config.num_labels) if config.num_labels > 0 else nn.Identity()

    def forward(self, pixel_values=None, head_mask=None, output_attentions=None, output_hidden_states=None):
        outputs = self.deit(
            pixel_values,
            head_mask=head_mask,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )

        sequence_output = outputs[0]

        logits = self.classifier(sequence_output[:, 0, :])
        # we don't use the rest of the hidden states

        return logits


# ---- the kit's adapter (glue, not part of the port) -------------------------------------------

from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter  # noqa: E402
from tck.reference import Conventions  # noqa: E402


def _deit_config(config) -> DeiTConfig:
    return DeiTConfig(
        hidden_size=config.d_model, num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
        intermediate_size=config.d_ff, image_size=config.image_size, patch_size=config.patch_size,
        num_channels=config.channels, num_labels=config.n_classes, hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
    )


def _extended_mask(x, key_padding):
    """BertModel.get_extended_attention_mask for a [B, L] keep-mask."""
    if key_padding is None:
        return None
    extended = key_padding[:, None, None, :].to(dtype=x.dtype)
    return (1.0 - extended) * torch.finfo(x.dtype).min


class _EncoderWithNorm(nn.Module):
    """The canonical `encoder`: DeiTEncoder, then DeiTModel's final layernorm (pre-LN stack)."""

    def __init__(self, config):
        super().__init__()
        self.encoder = DeiTEncoder(config)
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x, key_padding=None):
        return self.layernorm(self.encoder(x, attention_mask=_extended_mask(x, key_padding))[0])


def _layer_map(prefix="", mine=""):
    out = {}
    for n, m in (("q", "query"), ("k", "key"), ("v", "value")):
        for p in ("weight", "bias"):
            out[f"{prefix}self_attn.{n}.{p}"] = f"{mine}attention.attention.{m}.{p}"
    for p in ("weight", "bias"):
        out[f"{prefix}self_attn.o.{p}"] = f"{mine}attention.output.dense.{p}"
        out[f"{prefix}ffn.fc1.{p}"] = f"{mine}intermediate.dense.{p}"
        out[f"{prefix}ffn.fc2.{p}"] = f"{mine}output.dense.{p}"
        out[f"{prefix}norm1.{p}"] = f"{mine}layernorm_before.{p}"
        out[f"{prefix}norm2.{p}"] = f"{mine}layernorm_after.{p}"
    return out


def _encoder_map(config):
    out = {}
    for i in range(config.n_layers):
        out |= _layer_map(f"layers.{i}.", f"encoder.layer.{i}.")
    out |= {f"norm.{p}": f"layernorm.{p}" for p in ("weight", "bias")}
    return out


def _vit_map(config):
    out = {"patch_embed.weight": "deit.embeddings.patch_embeddings.projection.weight",
           "patch_embed.bias": "deit.embeddings.patch_embeddings.projection.bias",
           "cls_token": "deit.embeddings.cls_token", "pos_embed": "deit.embeddings.position_embeddings",
           "head.weight": "classifier.weight", "head.bias": "classifier.bias"}
    for i in range(config.n_layers):
        out |= _layer_map(f"encoder.layers.{i}.", f"deit.encoder.layer.{i}.")
    out |= {f"encoder.norm.{p}": f"deit.layernorm.{p}" for p in ("weight", "bias")}
    return out


_CONVENTIONS = Conventions(norm_placement="pre", activation="gelu", eps=1e-12, fully_masked_rows="uniform")

adapter = TorchModuleAdapter("deit-vit", [
    TorchEntry(
        "patch_embed",
        make=lambda config: DeiTPatchEmbeddings(_deit_config(config)),
        forward=lambda pe, images: pe(images),
        param_map={"weight": "projection.weight", "bias": "projection.bias"},
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: DeiTLayer(_deit_config(config)),
        forward=lambda layer, x, key_padding=None: layer(x, attention_mask=_extended_mask(x, key_padding))[0],
        param_map=_layer_map(),
        conventions=_CONVENTIONS,
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "encoder",
        make=lambda config: _EncoderWithNorm(_deit_config(config)),
        forward=lambda enc, x, key_padding=None: enc(x, key_padding),
        param_map=_encoder_map,
        conventions=_CONVENTIONS,
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "vit",
        make=lambda config: DeiTForImageClassification(_deit_config(config)),
        forward=lambda model, images: model(images),
        param_map=_vit_map,
        conventions=_CONVENTIONS,
    ),
])
