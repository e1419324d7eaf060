# fmt: off
# ruff: noqa
"""ELECTRA's discriminator encoder as transformers' ``modeling_electra.py`` (4.3x, eager
"absolute" self-attention) writes it: ``ElectraSelfAttention`` (``transpose_for_scores``),
``ElectraSelfOutput``, ``ElectraAttention``, ``ElectraIntermediate``, ``ElectraOutput``,
``ElectraLayer`` (``apply_chunking_to_forward``) and ``ElectraEncoder``, with
``ModuleUtilsMixin.get_extended_attention_mask``; then the kit's adapter (the glue at the end of
the file). Blind set 27, written for this benchmark."""

import math
from typing import Optional, Tuple

import torch
from torch import nn


class GELUActivation(nn.Module):
    """Original Implementation of the GELU activation function in Google BERT repo when initially created."""

    def __init__(self):
        super().__init__()
        self.act = nn.functional.gelu

    def forward(self, input):
        return self.act(input)


ACT2FN = {"gelu": GELUActivation}


class ElectraConfig:
    model_type = "electra"

    def __init__(self, vocab_size=30522, embedding_size=128, hidden_size=256, num_hidden_layers=12,
                 num_attention_heads=4, intermediate_size=1024, hidden_act="gelu", hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, max_position_embeddings=512, layer_norm_eps=1e-12,
                 position_embedding_type="absolute", chunk_size_feed_forward=0):
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.layer_norm_eps = layer_norm_eps
        self.position_embedding_type = position_embedding_type
        self.chunk_size_feed_forward = chunk_size_feed_forward


def get_extended_attention_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Makes broadcastable attention so that masked tokens are ignored (ModuleUtilsMixin)."""
    # We can provide a self-attention mask of dimensions [batch_size, from_seq_length, to_seq_length]
    # ourselves in which case we just need to make it broadcastable to all heads.
    if attention_mask.dim() == 3:
        extended_attention_mask = attention_mask[:, None, :, :]
    elif attention_mask.dim() == 2:
        # Provided a padding mask of dimensions [batch_size, seq_length]
        # - the model is an encoder, so make the mask broadcastable to [batch_size, num_heads, seq_length, seq_length]
        extended_attention_mask = attention_mask[:, None, None, :]
    else:
        raise ValueError(f"Wrong shape for attention_mask (shape {attention_mask.shape})")

    # Since attention_mask is 1.0 for positions we want to attend and 0.0 for
    # masked positions, this operation will create a tensor which is 0.0 for
    # positions we want to attend and the dtype's smallest value for masked positions.
    extended_attention_mask = extended_attention_mask.to(dtype=dtype)  # fp16 compatibility
    extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min
    return extended_attention_mask


def apply_chunking_to_forward(forward_fn, chunk_size: int, chunk_dim: int, *input_tensors) -> torch.Tensor:
    if chunk_size > 0:
        tensor_shape = input_tensors[0].shape[chunk_dim]
        num_chunks = input_tensors[0].shape[chunk_dim] // chunk_size
        input_tensors_chunks = tuple(input_tensor.chunk(num_chunks, dim=chunk_dim) for input_tensor in input_tensors)
        output_chunks = tuple(forward_fn(*input_tensors_chunk) for input_tensors_chunk in zip(*input_tensors_chunks))
        return torch.cat(output_chunks, dim=chunk_dim)
    return forward_fn(*input_tensors)


# Copied from transformers.models.bert.modeling_bert.BertSelfAttention with Bert->Electra
class ElectraSelfAttention(nn.Module):
    def __init__(self, config, position_embedding_type=None):
        super().__init__()
        if config.hidden_size % config.num_attention_heads != 0 and not hasattr(config, "embedding_size"):
            raise ValueError(
                f"The hidden size ({config.hidden_size}) is not a multiple of the number of attention "
                f"heads ({config.num_attention_heads})"
            )

        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = int(config.hidden_size / config.num_attention_heads)
        self.all_head_size = self.num_attention_heads * self.attention_head_size

        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)

        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.position_embedding_type = position_embedding_type or getattr(config, "position_embedding_type", "absolute")

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Optional[torch.FloatTensor] = None,
        head_mask: Optional[torch.FloatTensor] = None,
    ) -> Tuple[torch.Tensor]:
        mixed_query_layer = self.query(hidden_states)

        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        query_layer = self.transpose_for_scores(mixed_query_layer)

        # Take the dot product between "query" and "key" to get the raw attention scores.
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))

        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            # Apply the attention mask is (precomputed for all layers in ElectraModel forward() function)
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

        return (context_layer,)


# Copied from transformers.models.bert.modeling_bert.BertSelfOutput
class ElectraSelfOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.LayerNorm(hidden_states + input_tensor)
        return hidden_states


# Copied from transformers.models.bert.modeling_bert.BertAttention with Bert->Electra
class ElectraAttention(nn.Module):
    def __init__(self, config, position_embedding_type=None):
        super().__init__()
        self.self = ElectraSelfAttention(config, position_embedding_type=position_embedding_type)
        self.output = ElectraSelfOutput(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Optional[torch.FloatTensor] = None,
        head_mask: Optional[torch.FloatTensor] = None,
    ) -> Tuple[torch.Tensor]:
        self_outputs = self.self(
            hidden_states,
            attention_mask,
            head_mask,
        )
        attention_output = self.output(self_outputs[0], hidden_states)
        outputs = (attention_output,) + self_outputs[1:]  # add attentions if we output them
        return outputs


# Copied from transformers.models.bert.modeling_bert.BertIntermediate
class ElectraIntermediate(nn.Module):
    def __init__(self, config):
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


# Copied from transformers.models.bert.modeling_bert.BertOutput
class ElectraOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)  # after the FFN
        self.dropout = nn.Dropout(config.hidden_dropout_prob)  # after the FFN

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dense(hidden_states)  # intermediate_size -> hidden_size
        hidden_states = self.dropout(hidden_states)  # hidden_dropout_prob after the FFN
        hidden_states = self.LayerNorm(hidden_states + input_tensor)  # the layer's output
        return hidden_states


# Copied from transformers.models.bert.modeling_bert.BertLayer with Bert->Electra
class ElectraLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.chunk_size_feed_forward = config.chunk_size_feed_forward
        self.seq_len_dim = 1
        self.attention = ElectraAttention(config)
        self.intermediate = ElectraIntermediate(config)
        self.output = ElectraOutput(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Optional[torch.FloatTensor] = None,
        head_mask: Optional[torch.FloatTensor] = None,
    ) -> Tuple[torch.Tensor]:
        self_attention_outputs = self.attention(
            hidden_states,
            attention_mask,
            head_mask,
        )
        attention_output = self_attention_outputs[0]
        outputs = self_attention_outputs[1:]  # add self attentions if we output attention weights

        layer_output = apply_chunking_to_forward(
            self.feed_forward_chunk, self.chunk_size_feed_forward, self.seq_len_dim, attention_output
        )
        outputs = (layer_output,) + outputs
        return outputs

    def feed_forward_chunk(self, attention_output):
        intermediate_output = self.intermediate(attention_output)
        layer_output = self.output(intermediate_output, attention_output)
        return layer_output


# Copied from transformers.models.bert.modeling_bert.BertEncoder with Bert->Electra
class ElectraEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList([ElectraLayer(config) for _ in range(config.num_hidden_layers)])
        self.gradient_checkpointing = False

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Optional[torch.FloatTensor] = None,
        head_mask: Optional[torch.FloatTensor] = None,
    ) -> torch.Tensor:
        for i, layer_module in enumerate(self.layer):
            layer_head_mask = head_mask[i] if head_mask is not None else None

            layer_outputs = layer_module(
                hidden_states,
                attention_mask,
                layer_head_mask,
            )

            hidden_states = layer_outputs[0]

        return hidden_states


# ---- the kit's adapter (glue, not part of the port) -------------------------------------------

from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter  # noqa: E402
from tck.reference import Conventions  # noqa: E402


def _electra_config(config) -> ElectraConfig:
    return ElectraConfig(
        hidden_size=config.d_model, num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads, intermediate_size=config.d_ff,
    )


def _keep_mask(x, key_padding=None, attn_mask=None, causal=None):
    """ElectraModel's 0/1 attention_mask from the kit's keep-masks: [B, L] when there is only
    key padding (as a tokenizer gives it), [B, L, L] when a per-query mask or causality is asked."""
    B, L = x.shape[:2]
    if attn_mask is None and not bool(causal):
        return None if key_padding is None else key_padding.to(x.dtype)
    keep = torch.ones(B, L, L, dtype=torch.bool, device=x.device)
    if key_padding is not None:
        keep = keep & key_padding[:, None, :]
    if attn_mask is not None:
        keep = keep & (attn_mask if attn_mask.dim() == 3 else attn_mask[None])
    if bool(causal):
        keep = keep & torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    return keep.to(x.dtype)


def _run(module, x, key_padding=None, attn_mask=None, causal=None, layer=False):
    mask = _keep_mask(x, key_padding, attn_mask, causal)
    extended = None if mask is None else get_extended_attention_mask(mask, x.dtype)
    out = module(x, extended)
    return out[0] if layer else out


def _layer_map(prefix="", mine=""):
    parts = {
        "self_attn.q": "attention.self.query", "self_attn.k": "attention.self.key",
        "self_attn.v": "attention.self.value", "self_attn.o": "attention.output.dense",
        "norm1": "attention.output.LayerNorm", "ffn.fc1": "intermediate.dense",
        "ffn.fc2": "output.dense", "norm2": "output.LayerNorm",
    }
    return {f"{prefix}{k}.{p}": f"{mine}{v}.{p}" for k, v in parts.items() for p in ("weight", "bias")}


def _encoder_map(config):
    out = {}
    for i in range(config.n_layers):
        out |= _layer_map(f"layers.{i}.", f"layer.{i}.")
    return out


_CONVENTIONS = Conventions(norm_placement="post", activation="gelu", eps=1e-12, fully_masked_rows="uniform")

adapter = TorchModuleAdapter("electra-encoder", [
    TorchEntry(
        "encoder_layer",
        make=lambda config: ElectraLayer(_electra_config(config)),
        forward=lambda layer, x, key_padding=None, attn_mask=None, causal=None: _run(layer, x, key_padding, attn_mask, causal, True),
        param_map=_layer_map(),
        conventions=_CONVENTIONS,
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "encoder",
        make=lambda config: ElectraEncoder(_electra_config(config)),
        forward=lambda enc, x, key_padding=None, attn_mask=None, causal=None: _run(enc, x, key_padding, attn_mask, causal),
        param_map=_encoder_map,
        conventions=_CONVENTIONS,
        supports=ConfigSpace(split_heads=True),
    ),
])
