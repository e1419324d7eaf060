"""A Llama-style decoder written the way model hubs write them (blind benchmark implementation).

A ``HubConfig`` dataclass, ``RMSNorm``, ``RotaryEmbedding`` with a cos/sin table cached once
(half-split "rotate_half" layout), grouped-query ``Attention`` with ``repeat_kv``, a SwiGLU
``MLP``, ``DecoderLayer`` (pre-norm), ``Model`` and ``ForCausalLM`` with a KV-cache path.
Norm statistics, softmax and the RoPE table are formed in at least float32 whatever the
module's dtype (as transformers' LlamaRMSNorm and eager attention do).

The adapter at the bottom (``adapter``) exposes rms_norm, rope, gated_ffn,
causal_self_attention, decoder_block and causal_lm to ``tck run --adapter``.
This file is correct; tests/blind/bugs.json holds one-line changes to it.
"""

# bugs.json names lines of this file verbatim: the formatter must not rewrite them.
# fmt: off
# ruff: noqa: E501
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.adapters.base import Unsupported
from tck.reference import Config
from tck.reference.params import DECODER_CANONICAL


@dataclass
class HubConfig:
    hidden_size: int = 32
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    head_dim: int = 8
    intermediate_size: int = 64
    vocab_size: int = 40
    num_hidden_layers: int = 2
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 512
    tie_word_embeddings: bool = False


def _wide(t: torch.Tensor) -> torch.dtype:
    """float32 for half types, the tensor's own dtype otherwise (float64 stays float64)."""
    return torch.promote_types(t.dtype, torch.float32)


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(_wide(hidden_states))
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class RotaryEmbedding(nn.Module):
    """cos/sin of every position up to max_position_embeddings, computed once in float64.

    The table is a plain attribute, not a buffer, so module.to(float16) leaves it alone."""

    def __init__(self, head_dim: int, max_positions: int, base: float):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        t = torch.arange(max_positions, dtype=torch.float64)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos_cached = emb.cos()
        self.sin_cached = emb.sin()

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
        cos = self.cos_cached[position_ids].to(x.dtype)
        sin = self.sin_cached[position_ids].to(x.dtype)
        return cos, sin


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    cos = cos.unsqueeze(1)  # [B, 1, L, d]: one table for every head
    sin = sin.unsqueeze(1)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """[B, H_kv, L, d] -> [B, H_kv * n_rep, L, d], each kv head repeated in place."""
    batch, num_kv, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_kv, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_kv * n_rep, slen, head_dim)


def make_causal_mask(key_padding, q_len: int, k_len: int, device) -> torch.Tensor:
    """Boolean keep [B or 1, 1, q_len, k_len]: new query i (at index k_len - q_len + i) sees
    keys 0 .. k_len - q_len + i, and only real (unpadded) keys."""
    offset = k_len - q_len
    rows = torch.arange(q_len, device=device)[:, None] + offset
    cols = torch.arange(k_len, device=device)[None, :]
    keep = (cols <= rows)[None, None]
    if key_padding is not None:
        keep = keep & key_padding[:, None, None, :].bool()
    return keep


class Attention(nn.Module):
    def __init__(self, config: HubConfig):
        super().__init__()
        self.config = config
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, hidden_states, position_embeddings, key_padding=None, past_key_value=None):
        bsz, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        if past_key_value is not None:
            key_states = torch.cat([past_key_value[0], key_states], dim=2)
            value_states = torch.cat([past_key_value[1], value_states], dim=2)
        present = (key_states, value_states)

        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)

        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.scaling
        keep = make_causal_mask(key_padding, q_len, key_states.shape[2], hidden_states.device)
        attn_weights = attn_weights.masked_fill(~keep, torch.finfo(attn_weights.dtype).min)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=_wide(attn_weights))
        attn_weights = attn_weights.to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)

        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, -1)
        return self.o_proj(attn_output), present


class MLP(nn.Module):
    def __init__(self, config: HubConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: HubConfig):
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, position_embeddings, key_padding=None, past_key_value=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, present = self.self_attn(hidden_states, position_embeddings, key_padding, past_key_value)
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states, present


class Model(nn.Module):
    def __init__(self, config: HubConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config.head_dim, config.max_position_embeddings, config.rope_theta)

    def forward(self, input_ids, position_ids, key_padding=None, past_key_values=None):
        hidden_states = self.embed_tokens(input_ids)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        presents = []
        for i, layer in enumerate(self.layers):
            past = past_key_values[i] if past_key_values is not None else None
            hidden_states, present = layer(hidden_states, position_embeddings, key_padding, past)
            presents.append(present)
        return self.norm(hidden_states), presents


class ForCausalLM(nn.Module):
    def __init__(self, config: HubConfig):
        super().__init__()
        self.model = Model(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids, position_ids, key_padding=None, past_key_values=None):
        hidden_states, presents = self.model(input_ids, position_ids, key_padding, past_key_values)
        return self.lm_head(hidden_states), presents


# --------------------------------------------------------------------------- the adapter


def hub_config(config: Config) -> HubConfig:
    if config.head_dim_k != config.head_dim_v:
        raise Unsupported("this model has one head width for queries, keys and values")
    return HubConfig(
        hidden_size=config.d_model,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.kv_heads,
        head_dim=config.head_dim_k,
        intermediate_size=config.d_ff,
        vocab_size=config.vocab_size,
        num_hidden_layers=config.n_layers,
        max_position_embeddings=config.max_len,
        tie_word_embeddings=config.tie_weights,
    )


class _LayerHost(nn.Module):
    """One decoder layer (or its attention) with the model's rotary table beside it."""

    def __init__(self, config: Config, part: str):
        super().__init__()
        hub = hub_config(config)
        self.rotary_emb = RotaryEmbedding(hub.head_dim, hub.max_position_embeddings, hub.rope_theta)
        self.part = part
        self.inner = Attention(hub) if part == "attention" else DecoderLayer(hub)

    def forward(self, x, positions, key_padding=None, past=None):
        position_embeddings = self.rotary_emb(x, positions)
        return self.inner(x, position_embeddings, key_padding, past)


def _positions(x_or_ids: torch.Tensor, positions):
    if positions is not None:
        return positions.long()
    batch, length = x_or_ids.shape[:2]
    return torch.arange(length, device=x_or_ids.device).expand(batch, length)


def _host_forward(host, x, key_padding=None, positions=None):
    return host(x, _positions(x, positions), key_padding)[0]


def _host_step(host, cache, x, key_padding=None, positions=None):
    out, present = host(x, _positions(x, positions), key_padding, cache)
    return out, present


def _lm_forward(lm, ids, key_padding=None, positions=None):
    return lm(ids, _positions(ids, positions), key_padding)[0]


def _lm_step(lm, cache, ids, key_padding=None, positions=None):
    return lm(ids, _positions(ids, positions), key_padding, cache)


class _RopeHost(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.config = config

    def forward(self, x, positions):
        rotary = RotaryEmbedding(x.shape[-1], int(positions.max()) + 1, 10000.0)
        cos, sin = rotary(x, positions.long()[None, :].expand(x.shape[0], -1))
        return apply_rotary_pos_emb(x, x, cos, sin)[0]


def _attention_map(prefix: str, ours: str) -> dict[str, str]:
    return {f"{prefix}{c}.weight": f"{ours}{c}_proj.weight" for c in "qkvo"}


def _mlp_map(prefix: str, ours: str) -> dict[str, str]:
    return {f"{prefix}{c}.weight": f"{ours}{c}_proj.weight" for c in ("gate", "up", "down")}


def _layer_map(prefix: str, ours: str) -> dict[str, str]:
    return {
        **_attention_map(f"{prefix}self_attn.", f"{ours}self_attn."),
        **_mlp_map(f"{prefix}ffn.", f"{ours}mlp."),
        f"{prefix}norm1.weight": f"{ours}input_layernorm.weight",
        f"{prefix}norm2.weight": f"{ours}post_attention_layernorm.weight",
    }


def _lm_map(config: Config) -> dict[str, str]:
    mapping = {"embedding.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight"}
    for i in range(config.n_layers):
        mapping.update(_layer_map(f"layers.{i}.", f"model.layers.{i}."))
    if not config.tie_weights:
        mapping["lm_head.weight"] = "lm_head.weight"
    return mapping


LLAMA = dataclasses.replace(
    DECODER_CANONICAL,
    norm_kind="rms_norm",
    eps=1e-6,
    positions="rope",
    rope_layout="half_split",
    ffn_kind="gated",
    fully_masked_rows="undefined",  # finfo.min fill: a query with no key gets the mean of V
)
NO_BIAS = {"attention_bias": False, "ffn_bias": False}
ROWS = "A query whose keys are all masked gets finfo.min everywhere: the mean of V (undefined)."


def _entries() -> list[TorchEntry]:
    return [
        TorchEntry(
            "rms_norm",
            make=lambda c: RMSNorm(c.d_model, eps=1e-6),
            forward=lambda m, x: m(x),
            param_map={"weight": "weight"},
            conventions=dataclasses.replace(LLAMA, fully_masked_rows="zero"),
        ),
        TorchEntry(
            "rope",
            make=_RopeHost,
            forward=lambda m, x, positions: m(x, positions),
            param_map={},
            conventions=dataclasses.replace(LLAMA, fully_masked_rows="zero"),
        ),
        TorchEntry(
            "gated_ffn",
            make=lambda c: MLP(hub_config(c)),
            forward=lambda m, x: m(x),
            param_map=_mlp_map("", ""),
            conventions=LLAMA,
            config={"ffn_bias": False},
        ),
        TorchEntry(
            "causal_self_attention",
            make=lambda c: _LayerHost(c, "attention"),
            forward=_host_forward,
            step=_host_step,
            param_map=_attention_map("", "inner."),
            holds=lambda m: m.inner,
            conventions=LLAMA,
            config={"attention_bias": False},
            notes=(ROWS,),
        ),
        TorchEntry(
            "decoder_block",
            make=lambda c: _LayerHost(c, "layer"),
            forward=_host_forward,
            step=_host_step,
            param_map=_layer_map("", "inner."),
            holds=lambda m: m.inner,
            conventions=LLAMA,
            config=NO_BIAS,
            notes=(ROWS,),
        ),
        TorchEntry(
            "causal_lm",
            make=lambda c: ForCausalLM(hub_config(c)),
            forward=_lm_forward,
            step=_lm_step,
            param_map=_lm_map,
            conventions=LLAMA,
            config=NO_BIAS,
            notes=(ROWS,),
        ),
    ]


adapter = TorchModuleAdapter("blind.hub_llama", _entries(), devices=("cpu",))

__all__ = ["ForCausalLM", "HubConfig", "adapter"]
