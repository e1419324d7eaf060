# fmt: off
# ruff: noqa
"""A BERT encoder written from the paper and Google's TF reference (modeling.py), in PyTorch.

Post-LN layers ("LayerNorm(x + Sublayer(x))"), one fused ``qkv`` Linear of width 3D whose
output is cut in three with ``chunk``, heads split with plain ``view`` / ``permute`` (no
einops), the TF code's additive attention mask ``(1.0 - mask) * -10000.0``, exact GELU via
``erf`` as the TF code writes it, ``BertLayerNorm`` written out (the TF-style LayerNorm with
epsilon inside the square root, eps 1e-12), and ``BertIntermediate`` / ``BertOutput`` /
``BertSelfOutput`` as separate modules. The encoder is the stack of layers, no final norm.
"""
import math

import torch
from torch import nn

from tck.adapters import Chunk, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def gelu(x):
    """Original Google BERT gelu: x * 0.5 * (1.0 + erf(x / sqrt(2.0)))."""
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


class BertLayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-12):
        """Construct a layernorm module in the TF style (epsilon inside the square root)."""
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.variance_epsilon)
        return self.weight * x + self.bias


class BertSelfAttention(nn.Module):
    def __init__(self, hidden_size, num_attention_heads):
        super().__init__()
        self.num_attention_heads = num_attention_heads
        self.attention_head_size = hidden_size // num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.qkv = nn.Linear(hidden_size, 3 * self.all_head_size)
        self.dropout = nn.Dropout(0.1)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(*new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        mixed_query_layer, mixed_key_layer, mixed_value_layer = self.qkv(hidden_states).chunk(3, dim=-1)
        query_layer = self.transpose_for_scores(mixed_query_layer)
        key_layer = self.transpose_for_scores(mixed_key_layer)
        value_layer = self.transpose_for_scores(mixed_value_layer)
        # Take the dot product between "query" and "key" to get the raw attention scores.
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            # the additive mask precomputed for all layers in BertModel's forward()
            attention_scores = attention_scores + attention_mask
        attention_probs = nn.Softmax(dim=-1)(attention_scores)
        attention_probs = self.dropout(attention_probs)
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        context_layer = context_layer.view(*new_context_layer_shape)
        return context_layer


class BertSelfOutput(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.LayerNorm = BertLayerNorm(hidden_size, eps=eps)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.LayerNorm(hidden_states + input_tensor)
        return hidden_states


class BertAttention(nn.Module):
    def __init__(self, hidden_size, num_attention_heads, eps):
        super().__init__()
        self.self = BertSelfAttention(hidden_size, num_attention_heads)
        self.output = BertSelfOutput(hidden_size, eps)

    def forward(self, input_tensor, attention_mask=None):
        self_output = self.self(input_tensor, attention_mask)
        attention_output = self.output(self_output, input_tensor)
        return attention_output


class BertIntermediate(nn.Module):
    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.dense = nn.Linear(hidden_size, intermediate_size)
        self.intermediate_act_fn = gelu

    def forward(self, hidden_states):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.intermediate_act_fn(hidden_states)
        return hidden_states


class BertOutput(nn.Module):
    def __init__(self, intermediate_size, hidden_size, eps):
        super().__init__()
        self.dense = nn.Linear(intermediate_size, hidden_size)
        self.LayerNorm = BertLayerNorm(hidden_size, eps=eps)
        self.dropout = nn.Dropout(0.1)

    def forward(self, intermediate_output, attention_output):
        layer_output = self.dense(intermediate_output)
        layer_output = self.dropout(layer_output)
        layer_output = self.LayerNorm(layer_output + attention_output)
        return layer_output


class BertLayer(nn.Module):
    def __init__(self, hidden_size, num_attention_heads, intermediate_size, eps=1e-12):
        super().__init__()
        self.attention = BertAttention(hidden_size, num_attention_heads, eps)
        self.intermediate = BertIntermediate(hidden_size, intermediate_size)
        self.output = BertOutput(intermediate_size, hidden_size, eps)

    def forward(self, hidden_states, attention_mask=None):
        attention_output = self.attention(hidden_states, attention_mask)
        intermediate_output = self.intermediate(attention_output)
        layer_output = self.output(intermediate_output, attention_output)
        return layer_output


class BertEncoder(nn.Module):
    def __init__(self, hidden_size, num_attention_heads, intermediate_size, num_hidden_layers, eps=1e-12):
        super().__init__()
        self.layer = nn.ModuleList(
            [BertLayer(hidden_size, num_attention_heads, intermediate_size, eps) for _ in range(num_hidden_layers)]
        )

    def forward(self, hidden_states, attention_mask=None):
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask)
        return hidden_states


def get_extended_attention_mask(attention_mask, dtype):
    """[B, L] with 1 for tokens to attend and 0 for padding -> additive [B, 1, 1, L]."""
    extended_attention_mask = attention_mask[:, None, None, :]
    extended_attention_mask = extended_attention_mask.to(dtype=dtype)
    extended_attention_mask = (1.0 - extended_attention_mask) * -10000.0
    return extended_attention_mask


# ---- the adapter ----

def _layer_map(prefix):
    out = {}
    for i, n in enumerate("qkv"):
        out[f"self_attn.{n}.weight"] = Chunk(f"{prefix}attention.self.qkv.weight", i, 3)
        out[f"self_attn.{n}.bias"] = Chunk(f"{prefix}attention.self.qkv.bias", i, 3)
    mine = {
        "self_attn.o": "attention.output.dense", "norm1": "attention.output.LayerNorm",
        "ffn.fc1": "intermediate.dense", "ffn.fc2": "output.dense", "norm2": "output.LayerNorm",
    }
    for canon, name in mine.items():
        for p in ("weight", "bias"):
            out[f"{canon}.{p}"] = f"{prefix}{name}.{p}"
    return out


def _encoder_map(config):
    out = {}
    for i in range(config.n_layers):
        out |= {f"layers.{i}.{k}": v for k, v in _layer_map(f"layer.{i}.").items()}
    return out


def _forward(module, x, key_padding=None):
    mask = None
    if key_padding is not None:
        mask = get_extended_attention_mask(torch.as_tensor(key_padding), x.dtype)
    return module(x, mask)


BERT = Conventions(
    norm_placement="post", activation="gelu", eps=1e-12, fully_masked_rows="undefined", half_precision="input_dtype",
)
NOTES = ("BERT's -10000 additive mask: a row with every key padded is softmax of its raw scores; not promised",)

adapter = TorchModuleAdapter("paper_bert", [
    TorchEntry(
        "layer_norm", make=lambda config: BertLayerNorm(config.d_model, eps=1e-12), forward=lambda m, x: m(x),
        conventions=BERT,
    ),
    TorchEntry(
        "encoder_layer", make=lambda config: BertLayer(config.d_model, config.n_heads, config.d_ff),
        forward=_forward, param_map=_layer_map(""), conventions=BERT, notes=NOTES,
    ),
    TorchEntry(
        "encoder",
        make=lambda config: BertEncoder(config.d_model, config.n_heads, config.d_ff, config.n_layers),
        forward=_forward, param_map=_encoder_map, conventions=BERT, notes=NOTES,
    ),
])
