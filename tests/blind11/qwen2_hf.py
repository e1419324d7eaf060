# fmt: off
# ruff: noqa
"""A Qwen2 decoder written the way transformers' models/qwen2/modeling_qwen2.py writes it
(eager attention), with a DynamicCache-like per-layer key/value list: q/k/v projections with a
bias and o_proj without, RMSNorm with an upcast, rotate_half RoPE (rope_theta 1e6), repeat_kv
for grouped-query attention, SwiGLU MLP, an untied lm_head."""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


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
    max_position_embeddings: int = 512


def _upcast(dtype):
    # float16/bfloat16 statistics in float32; float32 and float64 stay as they are
    return torch.promote_types(dtype, torch.float32)


class Qwen2RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(_upcast(input_dtype))
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class Qwen2RotaryEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        dim = config.hidden_size // config.num_attention_heads
        self.base = config.rope_theta
        inv_freq = 1.0 / (self.base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim))
        self.inv_freq = inv_freq  # a plain attribute: module.to(dtype) leaves it in float64

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
    """Rotates half the hidden dims of the input."""
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


class DynamicCache:
    """Per layer, the keys and values of every token so far, [B, H_kv, T, hd]."""

    def __init__(self):
        self.key_cache = []
        self.value_cache = []

    def get_seq_length(self, layer_idx=0):
        if len(self.key_cache) <= layer_idx:
            return 0
        return self.key_cache[layer_idx].shape[-2]

    def update(self, key_states, value_states, layer_idx):
        if len(self.key_cache) <= layer_idx:
            self.key_cache.append(key_states)
            self.value_cache.append(value_states)
        else:
            self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)
            self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], value_states], dim=-2)
        return self.key_cache[layer_idx], self.value_cache[layer_idx]


def create_causal_mask(attention_mask, cache_position, target_length):
    """A boolean [B, 1, q, kv] mask, True where the query may attend the key."""
    kv_arange = torch.arange(target_length, device=cache_position.device)
    causal = kv_arange[None, :] <= cache_position[:, None]
    mask = causal[None, None, :, :]
    if attention_mask is not None:
        mask = mask & attention_mask[:, None, None, :].bool()
    return mask


class Qwen2Attention(nn.Module):
    def __init__(self, config, layer_idx=0):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=False)

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

        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.scaling
        min_dtype = torch.finfo(attn_weights.dtype).min
        attn_weights = attn_weights.masked_fill(~attention_mask, min_dtype)
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=_upcast(query_states.dtype)).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()

        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output)


class Qwen2MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return down_proj


class Qwen2DecoderLayer(nn.Module):
    def __init__(self, config, layer_idx=0):
        super().__init__()
        self.self_attn = Qwen2Attention(config, layer_idx)
        self.mlp = Qwen2MLP(config)
        self.input_layernorm = Qwen2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_values=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, position_embeddings, attention_mask, past_key_values)
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


def _prepare(config, hidden_states, attention_mask, position_ids, past_key_values):
    """cache_position, position_ids and the boolean mask of one call (Qwen2Model.forward)."""
    past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
    seq_len = hidden_states.shape[1]
    cache_position = torch.arange(past_seen_tokens, past_seen_tokens + seq_len, device=hidden_states.device)
    if position_ids is None:
        position_ids = cache_position.unsqueeze(0).expand(hidden_states.shape[0], -1)
    mask = create_causal_mask(attention_mask, cache_position, past_seen_tokens + seq_len)
    return position_ids, mask


class Qwen2Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([Qwen2DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = Qwen2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen2RotaryEmbedding(config)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None):
        inputs_embeds = self.embed_tokens(input_ids)
        position_ids, mask = _prepare(self.config, inputs_embeds, attention_mask, position_ids, past_key_values)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, position_embeddings, mask, past_key_values)
        hidden_states = self.norm(hidden_states)
        return hidden_states


class Qwen2ForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = Qwen2Model(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None):
        hidden_states = self.model(input_ids, attention_mask, position_ids, past_key_values)
        logits = self.lm_head(hidden_states)
        return logits


class _Sub(nn.Module):
    """One layer (or its attention) with its own rotary table, as a subject."""

    def __init__(self, config, kind):
        super().__init__()
        self.config = config
        self.kind = kind
        self.rotary_emb = Qwen2RotaryEmbedding(config)
        if kind == "attn":
            self.self_attn = Qwen2Attention(config, 0)
        else:
            self.layer = Qwen2DecoderLayer(config, 0)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None):
        position_ids, mask = _prepare(self.config, hidden_states, attention_mask, position_ids, past_key_values)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        if self.kind == "attn":
            return self.self_attn(hidden_states, position_embeddings, mask, past_key_values)
        return self.layer(hidden_states, position_embeddings, mask, past_key_values)


class _Rope(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config

    def forward(self, x, positions):
        head_dim = x.shape[-1]
        if positions.shape[-1] != x.shape[-2] or head_dim % 2:
            raise ValueError("positions must give one position per token and the head width must be even")
        rotary = Qwen2RotaryEmbedding(Qwen2Config(hidden_size=head_dim, num_attention_heads=1, rope_theta=self.config.rope_theta))
        cos, sin = rotary(x, positions.reshape(1, -1))
        q, _ = apply_rotary_pos_emb(x, x, cos, sin)
        return q


# ---- the adapter --------------------------------------------------------------------------
from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def _qwen_config(config):
    return Qwen2Config(
        vocab_size=config.vocab_size, hidden_size=config.d_model, intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads or config.n_heads, max_position_embeddings=config.max_len,
    )


def _t(a, dtype=None):
    return None if a is None else torch.as_tensor(a) if dtype is None else torch.as_tensor(a, dtype=dtype)


def _pos(positions):
    return None if positions is None else torch.as_tensor(positions, dtype=torch.int64)


def _mask(key_padding):
    return None if key_padding is None else torch.as_tensor(key_padding, dtype=torch.bool)


def _attn_map(prefix, target):
    out = {}
    for p in "qkv":
        out[f"{prefix}{p}.weight"] = f"{target}{p}_proj.weight"
        out[f"{prefix}{p}.bias"] = f"{target}{p}_proj.bias"
    out[f"{prefix}o.weight"] = f"{target}o_proj.weight"
    return out


def _layer_map(prefix, target):
    out = _attn_map(prefix + "self_attn.", target + "self_attn.")
    out[prefix + "norm1.weight"] = target + "input_layernorm.weight"
    out[prefix + "norm2.weight"] = target + "post_attention_layernorm.weight"
    for a, b in (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")):
        out[f"{prefix}ffn.{a}.weight"] = f"{target}mlp.{b}.weight"
    return out


def _lm_map(config):
    out = {"embedding.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight", "lm_head.weight": "lm_head.weight"}
    for i in range(config.n_layers):
        out |= _layer_map(f"layers.{i}.", f"model.layers.{i}.")
    return out


def _sub_forward(module, x, key_padding=None, positions=None):
    return module(x, _mask(key_padding), _pos(positions))


def _sub_step(module, cache, x, key_padding=None, positions=None):
    cache = cache if cache is not None else DynamicCache()
    return module(x, _mask(key_padding), _pos(positions), cache), cache


def _lm_forward(module, ids, key_padding=None, positions=None):
    return module(torch.as_tensor(ids, dtype=torch.int64), _mask(key_padding), _pos(positions))


def _lm_step(module, cache, ids, key_padding=None, positions=None):
    past_key_values = DynamicCache() if cache is None else cache
    return module(torch.as_tensor(ids, dtype=torch.int64), _mask(key_padding), _pos(positions), past_key_values), past_key_values


QWEN = Conventions(
    norm_placement="pre", activation="gelu_tanh", norm_kind="rms_norm", eps=1e-6, pe_base=1000000.0,
    rope_layout="half_split", embedding_scale="none", positions="rope", ffn_kind="gated",
    fully_masked_rows="uniform",
)
FIXED = {"n_kv_heads": 2, "attention_bias": True, "attention_out_bias": False, "ffn_bias": False, "tie_weights": False}

adapter = TorchModuleAdapter("qwen2-hf", [
    TorchEntry(
        "rms_norm",
        make=lambda config: Qwen2RMSNorm(config.d_model, eps=1e-6),
        forward=lambda m, x: m(x),
        param_map={"weight": "weight"},
        conventions=Conventions(norm_kind="rms_norm", eps=1e-6),
    ),
    TorchEntry(
        "rope",
        make=lambda config: _Rope(_qwen_config(config)),
        forward=lambda m, x, positions: m(x, torch.as_tensor(positions, dtype=torch.int64)),
        param_map={},
        conventions=Conventions(rope_layout="half_split", pe_base=1000000.0),
    ),
    TorchEntry(
        "gated_ffn",
        make=lambda config: Qwen2MLP(_qwen_config(config)),
        forward=lambda m, x: m(x),
        param_map={"gate.weight": "gate_proj.weight", "up.weight": "up_proj.weight", "down.weight": "down_proj.weight"},
        config={"ffn_bias": False},
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: _Sub(_qwen_config(config), "attn"),
        forward=_sub_forward,
        step=_sub_step,
        derives_positions=True,
        param_map=_attn_map("", "self_attn."),
        conventions=QWEN,
        config=FIXED,
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: _Sub(_qwen_config(config), "layer"),
        forward=_sub_forward,
        step=_sub_step,
        derives_positions=True,
        param_map=_layer_map("", "layer."),
        conventions=QWEN,
        config=FIXED,
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: Qwen2ForCausalLM(_qwen_config(config)),
        forward=_lm_forward,
        step=_lm_step,
        derives_positions=True,
        param_map=_lm_map,
        conventions=QWEN,
        config=FIXED,
    ),
])
