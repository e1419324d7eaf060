# fmt: off
# ruff: noqa
"""A Phi-3 decoder as transformers' ``models/phi3/modeling_phi3.py`` writes it (eager attention),
for the twelfth blind benchmark: a fused ``qkv_proj`` sliced into queries, keys and values
(grouped-query heads), a fused ``gate_up_proj`` split with ``chunk(2, dim=-1)``, ``Phi3RMSNorm``,
half-split RoPE (``rotate_half``, with Phi-3's partial-rotary slicing), a sliding window, a
``DynamicCache``-like cache, an upcast softmax, residual dropout modules and an untied
``lm_head``. Correct; the bugs of bugs.json are one-line edits of this file.
"""

from dataclasses import dataclass

import torch
from torch import nn

from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


@dataclass
class Phi3Config:
    vocab_size: int = 40
    hidden_size: int = 32
    intermediate_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    attention_dropout: float = 0.1
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 1.0
    sliding_window: int = 8
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False


def _upcast(dtype):
    # transformers upcasts to float32; float64 stays float64 here (no float32 island)
    return torch.promote_types(dtype, torch.float32)


class DynamicCache:
    """The per-layer key/value lists of transformers' DynamicCache."""

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


class Phi3RMSNorm(nn.Module):
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


class Phi3RotaryEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        head_dim = config.hidden_size // config.num_attention_heads
        dim = int(head_dim * config.partial_rotary_factor)
        self.base = config.rope_theta
        # a plain float64 attribute, not a buffer: module.to(dtype) leaves the table exact
        self.inv_freq = 1.0 / (self.base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim))

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
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
    q_embed = torch.cat([(q_rot * cos) + (rotate_half(q_rot) * sin), q_pass], dim=-1)
    k_embed = torch.cat([(k_rot * cos) + (rotate_half(k_rot) * sin), k_pass], dim=-1)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights.masked_fill(~causal_mask, torch.finfo(attn_weights.dtype).min)
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=_upcast(query.dtype)).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class Phi3Attention(nn.Module):
    def __init__(self, config, layer_idx=0):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        op_size = config.num_attention_heads * self.head_dim + 2 * (config.num_key_value_heads * self.head_dim)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=False)
        self.qkv_proj = nn.Linear(config.hidden_size, op_size, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_value=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        qkv = self.qkv_proj(hidden_states)
        query_pos = self.config.num_attention_heads * self.head_dim
        query_states = qkv[..., :query_pos]
        key_states = qkv[..., query_pos : query_pos + self.num_key_value_heads * self.head_dim]
        value_states = qkv[..., query_pos + self.num_key_value_heads * self.head_dim :]

        query_states = query_states.view(hidden_shape).transpose(1, 2)
        key_states = key_states.view(hidden_shape).transpose(1, 2)
        value_states = value_states.view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)

        attn_output, attn_weights = eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask,
            scaling=self.scaling, dropout=0.0 if not self.training else self.attention_dropout,
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class Phi3MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.activation_fn = nn.SiLU()

    def forward(self, hidden_states):
        up_states = self.gate_up_proj(hidden_states)
        gate, up_states = up_states.chunk(2, dim=-1)
        up_states = up_states * self.activation_fn(gate)
        return self.down_proj(up_states)


class Phi3DecoderLayer(nn.Module):
    def __init__(self, config, layer_idx=0):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.self_attn = Phi3Attention(config=config, layer_idx=layer_idx)
        self.mlp = Phi3MLP(config)
        self.input_layernorm = Phi3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Phi3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.config = config
        self.resid_attn_dropout = nn.Dropout(config.resid_pdrop)
        self.resid_mlp_dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_value=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, self_attn_weights = self.self_attn(
            hidden_states=hidden_states, position_embeddings=position_embeddings,
            attention_mask=attention_mask, past_key_value=past_key_value,
        )
        hidden_states = residual + self.resid_attn_dropout(hidden_states)
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + self.resid_mlp_dropout(hidden_states)
        return hidden_states


def sliding_window_causal_mask(cache_position, target_length, sliding_window, attention_mask=None):
    """A boolean keep-mask [B or 1, 1, n, T]: causal, within the window, not padding
    (transformers' causal_mask_function and sliding_window_overlay, and-ed)."""
    kv_idx = torch.arange(target_length, device=cache_position.device)
    causal = kv_idx[None, :] <= cache_position[:, None]
    window = kv_idx[None, :] > cache_position[:, None] - sliding_window
    mask = (causal & window)[None, None, :, :]
    if attention_mask is not None:
        mask = mask & attention_mask[:, None, None, :].to(torch.bool)
    return mask


def _prepare(config, rotary_emb, hidden_states, attention_mask, position_ids, past_key_values):
    """What Phi3Model.forward does before its layers: cache_position, position ids, the mask
    and the rotary cos/sin."""
    past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
    cache_position = torch.arange(past_seen_tokens, past_seen_tokens + hidden_states.shape[1], device=hidden_states.device)
    if position_ids is None:
        position_ids = cache_position.unsqueeze(0).expand(hidden_states.shape[0], -1)
    causal_mask = sliding_window_causal_mask(
        cache_position, past_seen_tokens + hidden_states.shape[1], config.sliding_window, attention_mask
    )
    position_embeddings = rotary_emb(hidden_states, position_ids)
    return causal_mask, position_embeddings


class Phi3Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.padding_idx = None
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_dropout = nn.Dropout(config.embd_pdrop)
        self.layers = nn.ModuleList([Phi3DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = Phi3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = Phi3RotaryEmbedding(config=config)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None):
        inputs_embeds = self.embed_tokens(input_ids)
        hidden_states = self.embed_dropout(inputs_embeds)
        causal_mask, position_embeddings = _prepare(
            self.config, self.rotary_emb, hidden_states, attention_mask, position_ids, past_key_values
        )
        for decoder_layer in self.layers[: self.config.num_hidden_layers]:
            hidden_states = decoder_layer(
                hidden_states, position_embeddings=position_embeddings,
                attention_mask=causal_mask, past_key_value=past_key_values,
            )
        hidden_states = self.norm(hidden_states)
        return hidden_states


class Phi3ForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = Phi3Model(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None):
        hidden_states = self.model(input_ids, attention_mask, position_ids, past_key_values)
        logits = self.lm_head(hidden_states)
        return logits


class Phi3AttentionBlock(nn.Module):
    """One attention (or one decoder layer) with the rotary table and mask Phi3Model builds."""

    def __init__(self, config, whole_layer):
        super().__init__()
        self.config = config
        self.rotary_emb = Phi3RotaryEmbedding(config=config)
        if whole_layer:
            self.layer = Phi3DecoderLayer(config, 0)
        else:
            self.self_attn = Phi3Attention(config, 0)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None):
        causal_mask, position_embeddings = _prepare(
            self.config, self.rotary_emb, hidden_states, attention_mask, position_ids, past_key_values
        )
        if hasattr(self, "layer"):
            return self.layer(hidden_states, position_embeddings, causal_mask, past_key_values)
        return self.self_attn(hidden_states, position_embeddings, causal_mask, past_key_values)[0]


# ---- the adapter --------------------------------------------------------------------------

WINDOW = 8


def _phi3_config(config):
    return Phi3Config(
        vocab_size=config.vocab_size, hidden_size=config.d_model, intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads or config.n_heads, sliding_window=WINDOW,
    )


def _attn_map(canon, mine, config):
    d = config.d_model // config.n_heads
    q = config.n_heads * d
    kv = (config.n_kv_heads or config.n_heads) * d
    return {
        f"{canon}q.weight": Param(f"{mine}qkv_proj.weight", slice=(0, 0, q)),
        f"{canon}k.weight": Param(f"{mine}qkv_proj.weight", slice=(0, q, q + kv)),
        f"{canon}v.weight": Param(f"{mine}qkv_proj.weight", slice=(0, q + kv, q + 2 * kv)),
        f"{canon}o.weight": f"{mine}o_proj.weight",
    }


def _ffn_map(canon, mine, config):
    f = config.d_ff
    return {
        f"{canon}gate.weight": Param(f"{mine}gate_up_proj.weight", slice=(0, 0, f)),
        f"{canon}up.weight": Param(f"{mine}gate_up_proj.weight", slice=(0, f, 2 * f)),
        f"{canon}down.weight": f"{mine}down_proj.weight",
    }


def _layer_map(canon, mine, config):
    return {
        **_attn_map(f"{canon}self_attn.", f"{mine}self_attn.", config),
        **_ffn_map(f"{canon}ffn.", f"{mine}mlp.", config),
        f"{canon}norm1.weight": f"{mine}input_layernorm.weight",
        f"{canon}norm2.weight": f"{mine}post_attention_layernorm.weight",
    }


def _lm_map(config):
    out = {"embedding.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
           "lm_head.weight": "lm_head.weight"}
    for i in range(config.n_layers):
        out.update(_layer_map(f"layers.{i}.", f"model.layers.{i}.", config))
    return out


def _attn_forward(module, x, key_padding=None, positions=None):
    return module(x, key_padding, positions)


def _attn_step(module, cache, x, key_padding=None, positions=None):
    cache = DynamicCache() if cache is None else cache
    return module(x, key_padding, positions, cache), cache


def _lm_forward(module, ids, key_padding=None, positions=None):
    return module(ids, key_padding, positions)


def _lm_step(module, cache, ids, key_padding=None, positions=None):
    cache = DynamicCache() if cache is None else cache
    return module(ids, key_padding, positions, cache), cache


def _rope_forward(module, x, positions):
    position_ids = positions if positions.dim() == 2 else positions[None, :]
    cos, sin = module(x, position_ids.expand(x.shape[0], -1))
    return apply_rotary_pos_emb(x, x, cos, sin)[0]


FIXED = {"n_kv_heads": 2, "bias": False, "tie_weights": False}
DECODER = Conventions(
    norm_placement="pre", norm_kind="rms_norm", eps=1e-5, positions="rope", rope_layout="half_split",
    ffn_kind="gated", gate_activation="silu", embedding_scale="none", fully_masked_rows="uniform",
    sliding_window=WINDOW,
)
SPACE = ConfigSpace(split_heads=True)

adapter = TorchModuleAdapter("phi3-hf", [
    TorchEntry(
        "rms_norm", make=lambda c: Phi3RMSNorm(c.d_model, eps=1e-5),
        forward=lambda m, x: m(x), conventions=Conventions(norm_kind="rms_norm", eps=1e-5),
    ),
    TorchEntry(
        "rope", make=lambda c: Phi3RotaryEmbedding(_phi3_config(c)), forward=_rope_forward,
        conventions=Conventions(rope_layout="half_split"),
    ),
    TorchEntry(
        "gated_ffn", make=lambda c: Phi3MLP(_phi3_config(c)), forward=lambda m, x: m(x),
        param_map=lambda c: _ffn_map("", "", c), conventions=DECODER, config=FIXED,
    ),
    TorchEntry(
        "causal_self_attention", make=lambda c: Phi3AttentionBlock(_phi3_config(c), False),
        forward=_attn_forward, step=_attn_step, derives_positions=True,
        param_map=lambda c: _attn_map("", "self_attn.", c),
        conventions=DECODER, config=FIXED, supports=SPACE,
    ),
    TorchEntry(
        "decoder_block", make=lambda c: Phi3AttentionBlock(_phi3_config(c), True),
        forward=_attn_forward, step=_attn_step, derives_positions=True,
        param_map=lambda c: _layer_map("", "layer.", c), conventions=DECODER, config=FIXED, supports=SPACE,
    ),
    TorchEntry(
        "causal_lm", make=lambda c: Phi3ForCausalLM(_phi3_config(c)),
        forward=_lm_forward, step=_lm_step, derives_positions=True,
        param_map=_lm_map, conventions=DECODER, config=FIXED, supports=SPACE,
    ),
])
