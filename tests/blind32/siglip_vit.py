# fmt: off
# ruff: noqa
# A SigLIP vision tower as transformers' models/siglip/modeling_siglip.py (4.4x-4.5x, eager
# attention through `eager_attention_forward`) writes it: `SiglipVisionEmbeddings` (a "valid"
# patch conv, an `nn.Embedding` position table read through the `position_ids` buffer),
# `SiglipAttention` (q/k/v/out_proj, `scale = head_dim**-0.5`, the softmax upcast to float32),
# `SiglipMLP` (fc1, gelu_pytorch_tanh, fc2), pre-LN `SiglipEncoderLayer` (layer_norm1/2),
# `SiglipEncoder`, `SiglipVisionTransformer` with `post_layernorm`, and
# `SiglipForImageClassification`'s mean pooling and `classifier`. SigLIP's embeddings are
# CLIP's without the class token; the kit's ViT has one, so CLIPVisionEmbeddings'
# `class_embedding` is restored as CLIP writes it and the mean runs over the patch tokens.
import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import nn


@dataclass
class SiglipVisionConfig:
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    num_channels: int = 3
    image_size: int = 224
    patch_size: int = 16
    hidden_act: str = "gelu_pytorch_tanh"
    layer_norm_eps: float = 1e-6
    attention_dropout: float = 0.0
    vision_use_head: bool = False
    num_labels: int = 2


class PytorchGELUTanh(nn.Module):
    """
    A fast C implementation of the tanh approximation of the GeLU activation function. See
    https://arxiv.org/abs/1606.08415.

    This implementation is equivalent to NewGELU and FastGELU but much faster. However, it is not an exact numerical
    match due to rounding errors.
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(input, approximate="tanh")


class GELUActivation(nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(input)


ACT2CLS = {"gelu": GELUActivation, "gelu_pytorch_tanh": PytorchGELUTanh}


class ClassInstantier(dict):
    def __getitem__(self, key):
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


ACT2FN = ClassInstantier(ACT2CLS)


def _prepare_4d_attention_mask(mask: torch.Tensor, dtype: torch.dtype, tgt_len: Optional[int] = None):
    """
    Creates a non-causal 4D mask of shape `(batch_size, 1, query_length, key_value_length)` from a 2D mask of shape
    `(batch_size, key_value_length)`
    """
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len

    expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)

    inverted_mask = 1.0 - expanded_mask

    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


class SiglipVisionEmbeddings(nn.Module):
    def __init__(self, config: SiglipVisionConfig):
        super().__init__()
        self.config = config
        self.embed_dim = config.hidden_size
        self.image_size = config.image_size
        self.patch_size = config.patch_size

        self.class_embedding = nn.Parameter(torch.randn(self.embed_dim))

        self.patch_embedding = nn.Conv2d(
            in_channels=config.num_channels,
            out_channels=self.embed_dim,
            kernel_size=self.patch_size,
            stride=self.patch_size,
            padding="valid",
        )

        self.num_patches = (self.image_size // self.patch_size) ** 2
        self.num_positions = self.num_patches + 1
        self.position_embedding = nn.Embedding(self.num_positions, self.embed_dim)
        self.register_buffer("position_ids", torch.arange(self.num_positions).expand((1, -1)), persistent=False)

    def forward(self, pixel_values: torch.FloatTensor, interpolate_pos_encoding=False) -> torch.Tensor:
        batch_size, _, height, width = pixel_values.shape
        if not interpolate_pos_encoding and (height != self.image_size or width != self.image_size):
            raise ValueError(
                f"Input image size ({height}*{width}) doesn't match model ({self.image_size}*{self.image_size})."
            )
        target_dtype = self.patch_embedding.weight.dtype
        patch_embeds = self.patch_embedding(pixel_values.to(dtype=target_dtype))  # shape = [*, width, grid, grid]
        patch_embeds = patch_embeds.flatten(2).transpose(1, 2)

        class_embeds = self.class_embedding.expand(batch_size, 1, -1)
        embeddings = torch.cat([class_embeds, patch_embeds], dim=1)
        embeddings = embeddings + self.position_embedding(self.position_ids)
        return embeddings


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
):
    attn_weights = torch.matmul(query, key.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask

    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)

    attn_output = torch.matmul(attn_weights, value)
    attn_output = attn_output.transpose(1, 2).contiguous()

    return attn_output, attn_weights


class SiglipAttention(nn.Module):
    """Multi-headed attention from 'Attention Is All You Need' paper"""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_dim = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.embed_dim // self.num_heads
        if self.head_dim * self.num_heads != self.embed_dim:
            raise ValueError(
                f"embed_dim must be divisible by num_heads (got `embed_dim`: {self.embed_dim} and `num_heads`:"
                f" {self.num_heads})."
            )
        self.scale = self.head_dim**-0.5
        self.dropout = config.attention_dropout
        self.is_causal = False

        self.k_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.v_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        output_attentions: Optional[bool] = False,
    ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Input shape: Batch x Time x Channel"""

        batch_size, seq_length, embed_dim = hidden_states.shape

        queries = self.q_proj(hidden_states)
        keys = self.k_proj(hidden_states)
        values = self.v_proj(hidden_states)

        queries = queries.view(batch_size, seq_length, self.num_heads, self.head_dim).transpose(1, 2)
        keys = keys.view(batch_size, seq_length, self.num_heads, self.head_dim).transpose(1, 2)
        values = values.view(batch_size, seq_length, self.num_heads, self.head_dim).transpose(1, 2)

        attention_interface = eager_attention_forward

        attn_output, attn_weights = attention_interface(
            self,
            queries,
            keys,
            values,
            attention_mask,
            is_causal=self.is_causal,
            scaling=self.scale,
            dropout=0.0 if not self.training else self.dropout,
        )

        attn_output = attn_output.reshape(batch_size, seq_length, embed_dim).contiguous()
        attn_output = self.out_proj(attn_output)

        if not output_attentions:
            attn_weights = None

        return attn_output, attn_weights


class SiglipMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.activation_fn = ACT2FN[config.hidden_act]
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.fc1(hidden_states)
        hidden_states = self.activation_fn(hidden_states)
        hidden_states = self.fc2(hidden_states)
        return hidden_states


class SiglipEncoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_dim = config.hidden_size
        self.layer_norm1 = nn.LayerNorm(self.embed_dim, eps=config.layer_norm_eps)
        self.self_attn = SiglipAttention(config)
        self.layer_norm2 = nn.LayerNorm(self.embed_dim, eps=config.layer_norm_eps)
        self.mlp = SiglipMLP(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor,
        output_attentions: Optional[bool] = False,
    ) -> Tuple[torch.FloatTensor]:
        residual = hidden_states

        hidden_states = self.layer_norm1(hidden_states)
        hidden_states, attn_weights = self.self_attn(
            hidden_states=hidden_states,
            attention_mask=attention_mask,
            output_attentions=output_attentions,
        )
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.layer_norm2(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states

        outputs = (hidden_states,)

        if output_attentions:
            outputs += (attn_weights,)

        return outputs


class SiglipEncoder(nn.Module):
    """
    Transformer encoder consisting of `config.num_hidden_layers` self attention layers. Each layer is a
    [`SiglipEncoderLayer`].
    """

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList([SiglipEncoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.gradient_checkpointing = False

    def forward(
        self,
        inputs_embeds,
        attention_mask: Optional[torch.Tensor] = None,
        output_attentions: Optional[bool] = None,
        output_hidden_states: Optional[bool] = None,
    ):
        encoder_states = () if output_hidden_states else None
        all_attentions = () if output_attentions else None

        hidden_states = inputs_embeds
        for encoder_layer in self.layers:
            if output_hidden_states:
                encoder_states = encoder_states + (hidden_states,)
            layer_outputs = encoder_layer(
                hidden_states,
                attention_mask,
                output_attentions=output_attentions,
            )

            hidden_states = layer_outputs[0]

            if output_attentions:
                all_attentions = all_attentions + (layer_outputs[1],)

        if output_hidden_states:
            encoder_states = encoder_states + (hidden_states,)

        return hidden_states, encoder_states, all_attentions


class SiglipVisionTransformer(nn.Module):
    def __init__(self, config: SiglipVisionConfig):
        super().__init__()
        self.config = config
        embed_dim = config.hidden_size

        self.embeddings = SiglipVisionEmbeddings(config)
        self.encoder = SiglipEncoder(config)
        self.post_layernorm = nn.LayerNorm(embed_dim, eps=config.layer_norm_eps)
        self.use_head = False if not hasattr(config, "vision_use_head") else config.vision_use_head
        if self.use_head:
            raise NotImplementedError("SiglipMultiheadAttentionPoolingHead: not part of this classifier")

    def forward(
        self,
        pixel_values,
        output_attentions: Optional[bool] = None,
        output_hidden_states: Optional[bool] = None,
        interpolate_pos_encoding: Optional[bool] = False,
    ):
        hidden_states = self.embeddings(pixel_values, interpolate_pos_encoding=interpolate_pos_encoding)

        encoder_outputs = self.encoder(
            inputs_embeds=hidden_states,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )

        last_hidden_state = encoder_outputs[0]
        last_hidden_state = self.post_layernorm(last_hidden_state)

        pooler_output = None

        return last_hidden_state, pooler_output


class SiglipForImageClassification(nn.Module):
    main_input_name = "pixel_values"

    def __init__(self, config: SiglipVisionConfig) -> None:
        super().__init__()

        self.num_labels = config.num_labels

        # Create the vision model with proper attention
        # and take only vision_model submodule (for backward compatibility)
        self.vision_model = SiglipVisionTransformer(config)

        # Classifier head
        self.classifier = (
            nn.Linear(config.hidden_size, config.num_labels) if config.num_labels > 0 else nn.Identity()
        )

    def forward(
        self,
        pixel_values: Optional[torch.Tensor] = None,
        interpolate_pos_encoding: bool = False,
    ):
        outputs = self.vision_model(
            pixel_values,
            interpolate_pos_encoding=interpolate_pos_encoding,
        )

        sequence_output = outputs[0]

        # average pool the patch tokens (the class token, token 0, is left out)
        sequence_output = torch.mean(sequence_output[:, 1:, :], dim=1)
        # apply classifier
        logits = self.classifier(sequence_output)

        return logits


# ---- the adapter
from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def _vision_config(config):
    return SiglipVisionConfig(
        hidden_size=config.d_model,
        intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_channels=config.channels,
        image_size=config.image_size,
        patch_size=config.patch_size,
        attention_dropout=0.1,
        num_labels=config.n_classes,
    )


def _mask(x, key_padding=None, attn_mask=None, causal=None):
    B, L = x.shape[0], x.shape[1]
    if key_padding is None and attn_mask is None and not (causal is not None and bool(causal)):
        return None
    keep = torch.ones(B, L, L, dtype=torch.bool)
    if key_padding is not None:
        keep = keep & key_padding[:, None, :]
    if attn_mask is not None:
        keep = keep & attn_mask
    if causal is not None and bool(causal):
        keep = keep & torch.ones(L, L, dtype=torch.bool).tril()
    inverted = 1.0 - keep[:, None].to(x.dtype)
    return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(x.dtype).min)


def _layer_params(prefix):
    names = {
        "self_attn.q": "self_attn.q_proj",
        "self_attn.k": "self_attn.k_proj",
        "self_attn.v": "self_attn.v_proj",
        "self_attn.o": "self_attn.out_proj",
        "norm1": "layer_norm1",
        "ffn.fc1": "mlp.fc1",
        "ffn.fc2": "mlp.fc2",
        "norm2": "layer_norm2",
    }
    return {f"{c}.{p}": f"{prefix}{y}.{p}" for c, y in names.items() for p in ("weight", "bias")}


def _encoder_params(config, prefix=""):
    out = {}
    for i in range(config.n_layers):
        out |= {f"layers.{i}.{k}": v for k, v in _layer_params(f"{prefix}layers.{i}.").items()}
    return out


def _vit_params(config):
    D, n = config.d_model, (config.image_size // config.patch_size) ** 2 + 1
    out = {
        "patch_embed.weight": "vision_model.embeddings.patch_embedding.weight",
        "patch_embed.bias": "vision_model.embeddings.patch_embedding.bias",
        "cls_token": Param("vision_model.embeddings.class_embedding", shape=(1, 1, D)),
        "pos_embed": Param("vision_model.embeddings.position_embedding.weight", shape=(1, n, D)),
        "encoder.norm.weight": "vision_model.post_layernorm.weight",
        "encoder.norm.bias": "vision_model.post_layernorm.bias",
        "head.weight": "classifier.weight",
        "head.bias": "classifier.bias",
    }
    out |= {f"encoder.{k}": v for k, v in _encoder_params(config, "vision_model.encoder.").items()}
    return out


_ISLAND = ("softmax",)  # eager_attention_forward: softmax(..., dtype=torch.float32).to(query.dtype)

adapter = TorchModuleAdapter("siglip-vit", [
    TorchEntry(
        "encoder_layer",
        make=lambda config: SiglipEncoderLayer(_vision_config(config)),
        forward=lambda m, x, key_padding=None, attn_mask=None, causal=None: m(x, _mask(x, key_padding, attn_mask, causal))[0],
        param_map=_layer_params(""),
        conventions=Conventions(norm_placement="pre", activation="gelu_tanh", eps=1e-6, fully_masked_rows="nan", float32_steps=_ISLAND),
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "encoder",
        make=lambda config: SiglipEncoder(_vision_config(config)),
        forward=lambda m, x, key_padding=None, attn_mask=None, causal=None: m(x, _mask(x, key_padding, attn_mask, causal))[0],
        param_map=_encoder_params,
        conventions=Conventions(norm_placement="pre", activation="gelu_tanh", eps=1e-6, final_norm="never", fully_masked_rows="nan", float32_steps=_ISLAND),
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "vit",
        make=lambda config: SiglipForImageClassification(_vision_config(config)),
        forward=lambda m, images: m(images),
        param_map=_vit_params,
        conventions=Conventions(norm_placement="pre", activation="gelu_tanh", eps=1e-6, pooling="mean", float32_steps=_ISLAND),
        supports=ConfigSpace(split_heads=True),
    ),
])
