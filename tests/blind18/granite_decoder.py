# fmt: off
# ruff: noqa
"""A decoder-only model written the way transformers' Granite (`modeling_granite.py`) writes it.

`GraniteConfig` carries the four Granite multipliers: `embedding_multiplier` (on the token
embeddings), `attention_multiplier` (the attention scale, used INSTEAD of 1/sqrt(head_dim)),
`residual_multiplier` (on each sublayer's output before the residual add) and `logits_scaling`
(the logits are divided by it). Here they are set to the values that make the model SPEC's:
`attention_multiplier = head_dim ** -0.5`, the three others 1.0.

`GraniteRMSNorm` (statistics in float32, as transformers does), `GraniteRotaryEmbedding` with
the half-split `rotate_half`, `GraniteAttention` with grouped-query attention (`repeat_kv`) and
`F.scaled_dot_product_attention(..., attn_mask=..., scale=self.scaling)` given an additive mask
the model builds (`_update_causal_mask`: `finfo.min` above the causal diagonal shifted by the
cache position, and at padded keys), `GraniteMLP` (`gate_proj`, `up_proj`, `down_proj`, SiLU),
a KV cache kept as per-layer tensors, a tied `lm_head`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class GraniteConfig:
    vocab_size: int = 40
    hidden_size: int = 32
    intermediate_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    max_position_embeddings: int = 512
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    attention_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = True
    embedding_multiplier: float = 1.0
    attention_multiplier: float | None = None  # None: head_dim ** -0.5 (set in __post_init__)
    residual_multiplier: float = 1.0
    logits_scaling: float = 1.0

    def __post_init__(self):
        self.head_dim = self.hidden_size // self.num_attention_heads
        if self.attention_multiplier is None:
            self.attention_multiplier = self.head_dim ** -0.5


class GraniteRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class GraniteRotaryEmbedding(nn.Module):
    def __init__(self, config: GraniteConfig):
        super().__init__()
        dim = config.head_dim
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        self.inv_freq = inv_freq  # kept float64: not a buffer, so module.to(dtype) leaves it

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].to(torch.float64)
        freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos()
        sin = emb.sin()
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class GraniteMLP(nn.Module):
    def __init__(self, config: GraniteConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class GraniteAttention(nn.Module):
    def __init__(self, config: GraniteConfig, layer_idx: int = 0):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = config.attention_multiplier
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=config.attention_bias)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=config.attention_bias)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=config.attention_bias)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=config.attention_bias)

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_values=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        if past_key_values is not None:
            key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx)

        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)

        attn_output = F.scaled_dot_product_attention(
            query_states, key_states, value_states, attn_mask=attention_mask, dropout_p=0.0, scale=self.scaling
        )
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output)


class GraniteDecoderLayer(nn.Module):
    def __init__(self, config: GraniteConfig, layer_idx: int = 0):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.self_attn = GraniteAttention(config=config, layer_idx=layer_idx)
        self.mlp = GraniteMLP(config)
        self.input_layernorm = GraniteRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = GraniteRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.residual_multiplier = config.residual_multiplier

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_values=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, position_embeddings, attention_mask, past_key_values)
        hidden_states = residual + hidden_states * self.residual_multiplier

        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states * self.residual_multiplier
        return hidden_states


class LayerCache:
    """The KV cache as per-layer tensors [B, H_kv, T, head_dim], grown along the sequence."""

    def __init__(self):
        self.key_cache: list[torch.Tensor] = []
        self.value_cache: list[torch.Tensor] = []

    def get_seq_length(self, layer_idx=0):
        return 0 if len(self.key_cache) <= layer_idx else self.key_cache[layer_idx].shape[-2]

    def update(self, key_states, value_states, layer_idx):
        if len(self.key_cache) <= layer_idx:
            self.key_cache.append(key_states)
            self.value_cache.append(value_states)
        else:
            self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)
            self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], value_states], dim=-2)
        return self.key_cache[layer_idx], self.value_cache[layer_idx]


def _update_causal_mask(attention_mask, input_tensor, cache_position, past_seen_tokens):
    """The additive 4-D mask [B, 1, q, T]: 0 where a query may attend, finfo.min elsewhere."""
    dtype = input_tensor.dtype
    min_dtype = torch.finfo(dtype).min
    batch_size, sequence_length = input_tensor.shape[0], input_tensor.shape[1]
    target_length = past_seen_tokens + sequence_length
    causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype)
    causal_mask = torch.triu(causal_mask, diagonal=1)
    causal_mask *= torch.arange(target_length) > cache_position.reshape(-1, 1)
    causal_mask = causal_mask[None, None, :, :].expand(batch_size, 1, -1, -1)
    if attention_mask is not None:
        causal_mask = causal_mask.clone()
        mask_length = attention_mask.shape[-1]
        padding_mask = causal_mask[:, :, :, :mask_length] + attention_mask[:, None, None, :].to(dtype)
        padding_mask = padding_mask == 0
        causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(padding_mask, min_dtype)
    return causal_mask


class GraniteModel(nn.Module):
    def __init__(self, config: GraniteConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([GraniteDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = GraniteRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = GraniteRotaryEmbedding(config)
        self.embedding_multiplier = config.embedding_multiplier

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None):
        inputs_embeds = self.embed_tokens(input_ids)
        inputs_embeds = inputs_embeds * self.embedding_multiplier
        past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
        cache_position = torch.arange(past_seen_tokens, past_seen_tokens + inputs_embeds.shape[1])
        if position_ids is None:
            position_ids = cache_position.unsqueeze(0).expand(inputs_embeds.shape[0], -1)
        causal_mask = _update_causal_mask(attention_mask, inputs_embeds, cache_position, past_seen_tokens)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, position_embeddings, causal_mask, past_key_values)
        return self.norm(hidden_states)


class GraniteForCausalLM(nn.Module):
    def __init__(self, config: GraniteConfig):
        super().__init__()
        self.config = config
        self.model = GraniteModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None):
        hidden_states = self.model(input_ids, attention_mask, position_ids, past_key_values)
        logits = self.lm_head(hidden_states)
        logits = logits / self.config.logits_scaling
        return logits


# ---- pieces run alone (the attention and block subjects): the model's own glue, one layer


class GraniteSubLayer(nn.Module):
    """One attention module or one decoder layer, with the model's rotary table and mask."""

    def __init__(self, config: GraniteConfig, kind: str):
        super().__init__()
        self.config = config
        self.inner = GraniteAttention(config, 0) if kind == "attention" else GraniteDecoderLayer(config, 0)
        self.rotary_emb = GraniteRotaryEmbedding(config)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None):
        past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
        cache_position = torch.arange(past_seen_tokens, past_seen_tokens + hidden_states.shape[1])
        if position_ids is None:
            position_ids = cache_position.unsqueeze(0).expand(hidden_states.shape[0], -1)
        causal_mask = _update_causal_mask(attention_mask, hidden_states, cache_position, past_seen_tokens)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        return self.inner(hidden_states, position_embeddings, causal_mask, past_key_values)


# ---- the adapter

from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def granite_config(config) -> GraniteConfig:
    if config.n_kv_heads is not None and config.n_heads % config.n_kv_heads:
        raise ValueError("n_kv_heads must divide n_heads")
    return GraniteConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.d_model,
        intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads or config.n_heads,
        max_position_embeddings=config.max_len,
    )


def _tensor(module, array, dtype=None):
    ref = next(module.parameters())
    return torch.as_tensor(np.asarray(array), dtype=dtype or ref.dtype)


def _ids(module, array):
    return torch.as_tensor(np.asarray(array), dtype=torch.long)


def _mask(key_padding):
    return None if key_padding is None else torch.as_tensor(np.asarray(key_padding)).long()


def _check_len(module, n):
    if n > module.config.max_position_embeddings:
        raise ValueError(f"sequence of {n} tokens is longer than max_position_embeddings")


def sub_forward(module, x, key_padding=None, positions=None):
    _check_len(module, x.shape[1])
    pos = None if positions is None else _ids(module, positions)
    return module(x, _mask(key_padding), pos)


def sub_step(module, cache, x, key_padding=None, positions=None):
    cache = cache if cache is not None else LayerCache()
    _check_len(module, cache.get_seq_length() + x.shape[1])
    pos = None if positions is None else _ids(module, positions)
    return module(x, _mask(key_padding), pos, cache), cache


def lm_forward(module, ids, key_padding=None, positions=None):
    _check_len(module, ids.shape[1])
    pos = None if positions is None else _ids(module, positions)
    return module(_ids(module, ids), _mask(key_padding), pos)


def lm_step(module, cache, ids, key_padding=None, positions=None):
    cache = cache if cache is not None else LayerCache()
    _check_len(module, cache.get_seq_length() + ids.shape[1])
    pos = None if positions is None else _ids(module, positions)
    return module(_ids(module, ids), _mask(key_padding), pos, cache), cache


ATTN = {f"{c}.weight": f"{c}_proj.weight" for c in "qkvo"}
MLP = {"gate.weight": "gate_proj.weight", "up.weight": "up_proj.weight", "down.weight": "down_proj.weight"}
BLOCK = {f"self_attn.{k}": f"self_attn.{v}" for k, v in ATTN.items()}
BLOCK |= {f"ffn.{k}": f"mlp.{v}" for k, v in MLP.items()}
BLOCK |= {"norm1.weight": "input_layernorm.weight", "norm2.weight": "post_attention_layernorm.weight"}


def lm_map(config):
    out = {"embedding.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight"}
    for i in range(config.n_layers):
        out |= {f"layers.{i}.{k}": f"model.layers.{i}.{v}" for k, v in BLOCK.items()}
    return out


CONVENTIONS = Conventions(
    norm_placement="pre",
    activation="gelu_tanh",
    norm_kind="rms_norm",
    eps=1e-6,
    positions="rope",
    rope_layout="half_split",
    ffn_kind="gated",
    gate_activation="silu",
    embedding_scale="none",
    fully_masked_rows="uniform",
    float32_steps=("norm_statistics",),
)
FFN_CONVENTIONS = Conventions(norm_placement="pre", activation="gelu_tanh", ffn_kind="gated", gate_activation="silu", embedding_scale="none")
NORM_CONVENTIONS = Conventions(norm_kind="rms_norm", eps=1e-6, float32_steps=("norm_statistics",))
NO_BIAS = {"attention": False, "ffn": False}
SPACE = ConfigSpace(split_heads=True, max_len=512, biases=NO_BIAS)
LM_SPACE = ConfigSpace(split_heads=True, max_len=512, biases=NO_BIAS, tied=True)

adapter = TorchModuleAdapter("granite_decoder", [
    TorchEntry(
        "rms_norm",
        make=lambda config: GraniteRMSNorm(config.d_model, eps=granite_config(config).rms_norm_eps),
        forward=lambda norm, x: norm(x),
        conventions=NORM_CONVENTIONS,
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: GraniteSubLayer(granite_config(config), "attention"),
        forward=sub_forward,
        step=sub_step,
        derives_positions=True,
        param_map={k: f"inner.{v}" for k, v in ATTN.items()},
        conventions=CONVENTIONS,
        supports=SPACE,
    ),
    TorchEntry(
        "gated_ffn",
        make=lambda config: GraniteMLP(granite_config(config)),
        forward=lambda mlp, x: mlp(x),
        param_map=MLP,
        conventions=FFN_CONVENTIONS,
        supports=SPACE,
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: GraniteSubLayer(granite_config(config), "block"),
        forward=sub_forward,
        step=sub_step,
        derives_positions=True,
        param_map={k: f"inner.{v}" for k, v in BLOCK.items()},
        conventions=CONVENTIONS,
        supports=SPACE,
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: GraniteForCausalLM(granite_config(config)),
        forward=lm_forward,
        step=lm_step,
        derives_positions=True,
        param_map=lm_map,
        conventions=CONVENTIONS,
        supports=LM_SPACE,
    ),
])
