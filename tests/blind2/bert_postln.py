# fmt: off
# ruff: noqa: E501, RUF005
"""A BERT encoder the way the first PyTorch ports of Google's BERT wrote it: separate query,
key and value ``nn.Linear`` layers named as in the TensorFlow checkpoint, heads moved with
``transpose_for_scores``, a boolean keep-mask turned into an *additive* "extended attention
mask" ``(1 - mask) * finfo.min`` added to the scores, a LayerNorm written by hand with
``variance_epsilon = 1e-12``, the exact GELU written with ``erf``, post-LN residuals.

Correct as written; tests/blind2/bugs.json lists one-line bugs of it (the blind benchmark).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Config, Conventions

LAYER_NORM_EPS = 1e-12


def gelu(x: torch.Tensor) -> torch.Tensor:
    """The exact GELU, x * Phi(x)."""
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


class BertLayerNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = LAYER_NORM_EPS):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.variance_epsilon)
        return self.weight * x + self.bias


def keep_mask(batch: int, lq: int, lk: int, key_padding=None, attn_mask=None, causal=False, device=None) -> torch.Tensor | None:
    """The keep-masks combined (True = may attend), [B, 1, Lq, Lk], or None when nothing masks."""
    keep = None
    if key_padding is not None:
        keep = key_padding[:, None, None, :]
    if attn_mask is not None:
        keep = attn_mask[None, None] if keep is None else keep & attn_mask[None, None]
    if causal:
        lower = torch.ones(lq, lk, dtype=torch.bool, device=device).tril()
        keep = lower[None, None] if keep is None else keep & lower[None, None]
    return keep


def extended_attention_mask(keep: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | float:
    """0 where a key may be attended, the most negative float where not (added to scores)."""
    if keep is None:
        return 0.0
    extended = keep.to(dtype)
    extended = (1.0 - extended) * torch.finfo(dtype).min
    return extended


class BertSelfAttention(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.num_attention_heads = config.n_heads
        self.attention_head_size = config.d_model // config.n_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.d_model, self.all_head_size)
        self.key = nn.Linear(config.d_model, self.all_head_size)
        self.value = nn.Linear(config.d_model, self.all_head_size)

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(*new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask, key_states=None, value_states=None):
        key_states = hidden_states if key_states is None else key_states
        value_states = hidden_states if value_states is None else value_states
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(key_states))
        value_layer = self.transpose_for_scores(self.value(value_states))

        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)

        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        return context_layer.view(*new_context_layer_shape)


class BertAttention(nn.Module):
    """Self-attention and its output projection (``attention.output.dense``), no norm: the mha."""

    def __init__(self, config: Config):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.dense = nn.Linear(config.d_model, config.d_model)

    def forward(self, hidden_states, attention_mask, key_states=None, value_states=None):
        return self.dense(self.self(hidden_states, attention_mask, key_states, value_states))


class BertIntermediate(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_ff)

    def forward(self, hidden_states):
        return gelu(self.dense(hidden_states))


class BertFFN(nn.Module):
    """intermediate.dense, GELU, output.dense (the FFN without BERT's residual and norm)."""

    def __init__(self, config: Config):
        super().__init__()
        self.intermediate = BertIntermediate(config)
        self.dense = nn.Linear(config.d_ff, config.d_model)

    def forward(self, hidden_states):
        return self.dense(self.intermediate(hidden_states))


class BertLayer(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.attention = BertAttention(config)
        self.attention_norm = BertLayerNorm(config.d_model)
        self.ffn = BertFFN(config)
        self.output_norm = BertLayerNorm(config.d_model)

    def forward(self, hidden_states, attention_mask):
        attention_output = self.attention(hidden_states, attention_mask)
        attention_output = self.attention_norm(attention_output + hidden_states)
        layer_output = self.ffn(attention_output)
        layer_output = self.output_norm(layer_output + attention_output)
        return layer_output


class BertEncoder(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.n_layers)])

    def forward(self, hidden_states, attention_mask):
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask)
        return hidden_states


# ---------------------------------------------------------------- the adapter

def self_masked(module, x, key_padding=None, attn_mask=None, causal=None):
    """Call a layer or the encoder on x with the kit's keep-masks made additive."""
    keep = keep_mask(x.shape[0], x.shape[1], x.shape[1], key_padding, attn_mask, bool(causal), x.device)
    return module(x, extended_attention_mask(keep, x.dtype))


def mha_forward(module, query, key, value, key_padding=None, attn_mask=None, causal=None):
    keep = keep_mask(query.shape[0], query.shape[1], key.shape[1], key_padding, attn_mask, bool(causal), query.device)
    return module(query, extended_attention_mask(keep, query.dtype), key, value)


def mha_map(ours: str, theirs: str) -> dict:
    mapping = {}
    for canonical, mine in (("q", "self.query"), ("k", "self.key"), ("v", "self.value"), ("o", "dense")):
        for p in ("weight", "bias"):
            mapping[f"{ours}{canonical}.{p}"] = f"{theirs}{mine}.{p}"
    return mapping


def ffn_map(ours: str, theirs: str) -> dict:
    mapping = {}
    for p in ("weight", "bias"):
        mapping[f"{ours}fc1.{p}"] = f"{theirs}intermediate.dense.{p}"
        mapping[f"{ours}fc2.{p}"] = f"{theirs}dense.{p}"
    return mapping


def layer_map(ours: str, theirs: str) -> dict:
    mapping = mha_map(f"{ours}self_attn.", f"{theirs}attention.") | ffn_map(f"{ours}ffn.", f"{theirs}ffn.")
    for p in ("weight", "bias"):
        mapping[f"{ours}norm1.{p}"] = f"{theirs}attention_norm.{p}"
        mapping[f"{ours}norm2.{p}"] = f"{theirs}output_norm.{p}"
    return mapping


def encoder_map(c: Config) -> dict:
    mapping = {}
    for i in range(c.n_layers):
        mapping |= layer_map(f"layers.{i}.", f"layer.{i}.")
    return mapping


# finfo.min added to the scores: a query whose keys are all masked attends evenly to them all
BERT = Conventions(norm_placement="post", activation="gelu", eps=LAYER_NORM_EPS, fully_masked_rows="uniform")
MASKED = Conventions(fully_masked_rows="uniform")
DTYPES = ("float64", "float32")  # finfo.min plus a score overflows to -inf in float16

adapter = TorchModuleAdapter("bert-postln", [
    TorchEntry("mha", make=BertAttention, forward=mha_forward, param_map=mha_map("", ""),
               conventions=MASKED, dtypes=DTYPES),
    TorchEntry("layer_norm", make=lambda c: BertLayerNorm(c.d_model), forward=lambda m, x: m(x),
               conventions=Conventions(eps=LAYER_NORM_EPS), dtypes=DTYPES),
    TorchEntry("ffn", make=BertFFN, forward=lambda m, x: m(x), param_map=ffn_map("", ""),
               conventions=Conventions(activation="gelu"), dtypes=DTYPES),
    TorchEntry("encoder_layer", make=BertLayer, forward=self_masked, param_map=layer_map("", ""),
               conventions=BERT, dtypes=DTYPES),
    TorchEntry("encoder", make=BertEncoder, forward=self_masked, param_map=encoder_map,
               conventions=BERT, dtypes=DTYPES),
])
