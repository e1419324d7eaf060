# fmt: off
# ruff: noqa: E501, B905
"""A Qwen2-style decoder with a Mistral-style rolling-buffer sliding-window cache.

Written the way GPT-NeoX / Megatron-derived checkpoints store attention: one fused
``query_key_value`` weight laid out **per key/value group** ([n_kv, q_per_kv + 2, head_dim,
hidden]: a group's query heads, then its key head, then its value head), biases on q, k and v
but none on the output projection (Qwen2), grouped-query attention by indexing each query
head's group, RoPE by ``rotate_half`` with ``rope_theta`` 1e6, RMSNorm (eps 1e-6), SwiGLU
without biases, an untied head. Attention sees a sliding window of ``sliding_window`` keys
(a query sees itself and the ``w - 1`` keys before it); the cache is Mistral's rolling
buffer: each layer keeps only the last ``w - 1`` keys and values, with the absolute slot
index of the first, and a counter of tokens seen. A query whose keys are all masked gets
zeros. In float16/bfloat16 the RMSNorm statistics, the RoPE angles and the softmax are
float32; in float64 everything stays float64.

Written for transformer-tck's fourth blind diagnosis benchmark (tests/blind4/PROTOCOL.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.adapters.reference import LLAMA
from tck.adapters.torch_module import Param


@dataclass
class Qwen2Config:
    vocab_size: int = 40
    hidden_size: int = 32
    intermediate_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1000000.0
    sliding_window: int = 4
    tie_word_embeddings: bool = False


def _compute_dtype(dtype):
    # the 16-bit paths compute statistics, angles and probabilities in float32
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


class Qwen2RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(_compute_dtype(input_dtype))
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class Qwen2RotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, position_ids):
        # position_ids [B, T]; angles in float32 at least
        inv_freq = self.inv_freq.to(_compute_dtype(x.dtype))
        freqs = position_ids[:, :, None].to(inv_freq.dtype) * inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class RollingCache:
    """Mistral's rolling buffer for one layer: the last ``window - 1`` keys and values."""

    def __init__(self, window):
        self.window = window
        self.key = None
        self.value = None
        self.seen = 0

    def extend(self, key, value):
        """The keys and values a step attends (the kept ones, then the new ones) and the slot
        index of the first of them; keeps the last window - 1 for the next step."""
        if self.key is None:
            keys, values = key, value
        else:
            keys = torch.cat([self.key, key], dim=2)
            values = torch.cat([self.value, value], dim=2)
        first = self.seen - (0 if self.key is None else self.key.shape[2])
        keep = self.window - 1
        self.key = keys[:, :, -keep:] if keep > 0 else keys[:, :, :0]
        self.value = values[:, :, -keep:] if keep > 0 else values[:, :, :0]
        self.seen += key.shape[2]
        return keys, values, first


class Qwen2Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.hidden_size // self.num_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.sliding_window = config.sliding_window
        per_group = self.num_key_value_groups + 2
        self.query_key_value = nn.Parameter(torch.randn(self.num_key_value_heads, per_group, self.head_dim, self.hidden_size) * 0.1)
        self.query_key_value_bias = nn.Parameter(torch.zeros(self.num_key_value_heads, per_group, self.head_dim))
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=False)
        self.rotary_emb = Qwen2RotaryEmbedding(self.head_dim, base=config.rope_theta)

    def forward(self, hidden_states, position_ids, attention_mask=None, cache=None):
        bsz, q_len, _ = hidden_states.size()
        g = self.num_key_value_groups
        weight = self.query_key_value.reshape(-1, self.hidden_size)
        fused = F.linear(hidden_states, weight, self.query_key_value_bias.reshape(-1))
        fused = fused.view(bsz, q_len, self.num_key_value_heads, g + 2, self.head_dim)
        query_states = fused[:, :, :, :g].reshape(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = fused[:, :, :, g].transpose(1, 2)
        value_states = fused[:, :, :, g + 1].transpose(1, 2)

        cos, sin = self.rotary_emb(value_states, position_ids)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        if cache is not None:
            key_states, value_states, first = cache.extend(key_states, value_states)
        else:
            first = 0
        kv_len = key_states.shape[2]
        q_slot = torch.arange(q_len, device=hidden_states.device) + (first + kv_len - q_len)
        k_slot = torch.arange(kv_len, device=hidden_states.device) + first
        visible = (k_slot[None, :] <= q_slot[:, None]) & (k_slot[None, :] > q_slot[:, None] - self.sliding_window)
        visible = visible[None, None]
        if attention_mask is not None:
            visible = visible & attention_mask[:, None, None, first : first + kv_len]

        group = torch.arange(self.num_heads, device=hidden_states.device) // g
        key_states = key_states[:, group]
        value_states = value_states[:, group]

        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.head_dim ** -0.5
        attn_weights = attn_weights.masked_fill(~visible, float("-inf"))
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=_compute_dtype(query_states.dtype)).to(query_states.dtype)
        attn_weights = torch.nan_to_num(attn_weights, nan=0.0)
        attn_output = torch.matmul(attn_weights, value_states)

        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, self.hidden_size)
        return self.o_proj(attn_output)


class Qwen2MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen2DecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self_attn = Qwen2Attention(config)
        self.mlp = Qwen2MLP(config)
        self.input_layernorm = Qwen2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, position_ids, attention_mask=None, cache=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, position_ids, attention_mask=attention_mask, cache=cache)
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


class Qwen2ForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([Qwen2DecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = Qwen2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, position_ids, attention_mask=None, past_key_values=None):
        hidden_states = self.embed_tokens(input_ids)
        caches = past_key_values if past_key_values is not None else [None] * len(self.layers)
        for decoder_layer, cache in zip(self.layers, caches):
            hidden_states = decoder_layer(hidden_states, position_ids, attention_mask=attention_mask, cache=cache)
        hidden_states = self.norm(hidden_states)
        return self.lm_head(hidden_states)


# ---- the adapter -------------------------------------------------------------------------

FIXED = {"n_kv_heads": 2, "attention_bias": True, "attention_out_bias": False, "ffn_bias": False, "tie_weights": False}
QWEN2 = replace(LLAMA, eps=1e-6, pe_base=1000000.0, sliding_window=4)


def _config(config) -> Qwen2Config:
    return Qwen2Config(vocab_size=config.vocab_size, hidden_size=config.d_model, intermediate_size=config.d_ff,
                       num_hidden_layers=config.n_decoder_layers, num_attention_heads=config.n_heads,
                       num_key_value_heads=config.n_kv_heads or config.n_heads)


def _attn_map(prefix: str, theirs: str, config) -> dict:
    h, kv, d = config.n_heads, config.n_kv_heads or config.n_heads, config.d_model // config.n_heads
    g = h // kv
    out = {}
    for name, (start, stop, heads) in {"q": (0, g, h), "k": (g, g + 1, kv), "v": (g + 1, g + 2, kv)}.items():
        out[f"{prefix}{name}.weight"] = Param(f"{theirs}query_key_value", slice=(1, start, stop), shape=(heads * d, config.d_model))
        out[f"{prefix}{name}.bias"] = Param(f"{theirs}query_key_value_bias", slice=(1, start, stop), shape=(heads * d,))
    out[f"{prefix}o.weight"] = f"{theirs}o_proj.weight"
    return out


def _mlp_map(prefix: str, theirs: str) -> dict:
    return {f"{prefix}{p}.weight": f"{theirs}{p}_proj.weight" for p in ("gate", "up", "down")}


def _block_map(prefix: str, theirs: str, config) -> dict:
    out = _attn_map(f"{prefix}self_attn.", f"{theirs}self_attn.", config)
    out.update(_mlp_map(f"{prefix}ffn.", f"{theirs}mlp."))
    out[f"{prefix}norm1.weight"] = f"{theirs}input_layernorm.weight"
    out[f"{prefix}norm2.weight"] = f"{theirs}post_attention_layernorm.weight"
    return out


def _lm_map(config) -> dict:
    out = {"embedding.weight": "embed_tokens.weight", "lm_head.weight": "lm_head.weight", "norm.weight": "norm.weight"}
    for i in range(config.n_decoder_layers):
        out.update(_block_map(f"layers.{i}.", f"layers.{i}.", config))
    return out


def _positions(x, positions, cache):
    if positions is not None:
        return positions
    start = 0 if cache is None else cache.seen
    return torch.arange(start, start + x.shape[1], device=x.device)[None].expand(x.shape[0], -1)


def _layer_forward(module, x, key_padding=None, positions=None):
    return module(x, _positions(x, positions, None), attention_mask=key_padding)


def _layer_step(module, cache, x, key_padding=None, positions=None):
    cache = cache if cache is not None else RollingCache(module_window(module))
    position_ids = _positions(x, positions, cache)
    return module(x, position_ids, attention_mask=key_padding, cache=cache), cache


def module_window(module) -> int:
    attn = module if isinstance(module, Qwen2Attention) else module.self_attn
    return attn.sliding_window


def _lm_forward(model, ids, key_padding=None, positions=None):
    return model(ids, _positions(ids, positions, None), attention_mask=key_padding)


def _lm_step(model, cache, ids, key_padding=None, positions=None):
    if cache is None:
        cache = [RollingCache(model.config.sliding_window) for _ in model.layers]
    position_ids = _positions(ids, positions, cache[0])
    return model(ids, position_ids, attention_mask=key_padding, past_key_values=cache), cache


def _rope_forward(rotary, x, positions):
    if positions.dim() == 1:
        positions = positions[None].expand(x.shape[0], -1)
    cos, sin = rotary(x, positions)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (x * cos) + (rotate_half(x) * sin)


adapter = TorchModuleAdapter("qwen2-swa", [
    TorchEntry(
        "rms_norm",
        make=lambda config: Qwen2RMSNorm(config.d_model, eps=1e-6),
        forward=lambda norm, x: norm(x),
        conventions=QWEN2,
    ),
    TorchEntry(
        "rope",
        make=lambda config: Qwen2RotaryEmbedding(config.d_model // config.n_heads, base=1000000.0),
        forward=_rope_forward,
        conventions=QWEN2,
    ),
    TorchEntry(
        "gated_ffn",
        make=lambda config: Qwen2MLP(_config(config)),
        forward=lambda mlp, x: mlp(x),
        param_map=lambda config: _mlp_map("", ""),
        conventions=QWEN2,
        config={"ffn_bias": False},
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: Qwen2Attention(_config(config)),
        forward=_layer_forward,
        step=_layer_step,
        derives_positions=True,
        param_map=lambda config: _attn_map("", "", config),
        conventions=QWEN2,
        config=FIXED,
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: Qwen2DecoderLayer(_config(config)),
        forward=_layer_forward,
        step=_layer_step,
        derives_positions=True,
        param_map=lambda config: _block_map("", "", config),
        conventions=QWEN2,
        config=FIXED,
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: Qwen2ForCausalLM(_config(config)),
        forward=_lm_forward,
        step=_lm_step,
        derives_positions=True,
        param_map=_lm_map,
        conventions=QWEN2,
        config=FIXED,
    ),
])
