# fmt: off
# ruff: noqa
"""A decoder written the way transformers' StarCoder2 (models/starcoder2/modeling_starcoder2.py)
writes it: q_proj/k_proj/v_proj/o_proj with biases, grouped-query attention (repeat_kv), RoPE
half-split (rotate_half, apply_rotary_pos_emb with position_ids), LayerNorm with bias, a plain
MLP c_fc -> gelu_pytorch_tanh -> c_proj, pre-LN, a final norm, a sliding window, a KV cache of
per-layer key/value tensors concatenated along the sequence, and a 4-D additive float mask
built from the 2-D attention mask with torch.finfo(dtype).min."""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Starcoder2Config:
    vocab_size: int = 40
    hidden_size: int = 32
    intermediate_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 512
    norm_epsilon: float = 1e-5
    rope_theta: float = 10000.0
    sliding_window: int = 8
    use_bias: bool = True
    residual_dropout: float = 0.0
    embedding_dropout: float = 0.0
    attention_dropout: float = 0.0
    tie_word_embeddings: bool = True


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
    """(batch, num_key_value_heads, seqlen, head_dim) -> (batch, num_attention_heads, seqlen, head_dim)"""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class Starcoder2RotaryEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        dim = config.hidden_size // config.num_attention_heads
        base = config.rope_theta
        # a plain attribute, not a buffer: module.to(dtype) never rounds it (angles in float64)
        self.inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim))

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].to(torch.float64)
        freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos()
        sin = emb.sin()
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


class Starcoder2MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        embed_dim = config.hidden_size
        self.c_fc = nn.Linear(embed_dim, config.intermediate_size, bias=config.use_bias)
        self.c_proj = nn.Linear(config.intermediate_size, embed_dim, bias=config.use_bias)
        self.act = lambda t: F.gelu(t, approximate="tanh")  # ACT2FN["gelu_pytorch_tanh"]
        self.residual_dropout = config.residual_dropout

    def forward(self, hidden_states):
        hidden_states = self.c_fc(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.c_proj(hidden_states)
        hidden_states = F.dropout(hidden_states, p=self.residual_dropout, training=self.training)
        return hidden_states


class Starcoder2Attention(nn.Module):
    def __init__(self, config, layer_idx=0):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = config.attention_dropout
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=config.use_bias)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=config.use_bias)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=config.use_bias)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=config.use_bias)
        self.residual_dropout = config.residual_dropout

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_value=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        if past_key_value is not None:
            key_states = torch.cat([past_key_value[0], key_states], dim=-2)
            value_states = torch.cat([past_key_value[1], value_states], dim=-2)
        present = (key_states, value_states)

        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)

        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.scaling
        attn_weights = attn_weights + attention_mask

        softmax_dtype = torch.promote_types(query_states.dtype, torch.float32)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=softmax_dtype).to(query_states.dtype)
        attn_weights = nn.functional.dropout(attn_weights, p=self.attention_dropout, training=self.training)
        attn_output = torch.matmul(attn_weights, value_states)

        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        attn_output = nn.functional.dropout(attn_output, p=self.residual_dropout, training=self.training)
        return attn_output, present


class Starcoder2DecoderLayer(nn.Module):
    def __init__(self, config, layer_idx=0):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.self_attn = Starcoder2Attention(config, layer_idx)
        self.mlp = Starcoder2MLP(config)
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.norm_epsilon)
        self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=config.norm_epsilon)

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_value=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, present = self.self_attn(hidden_states, position_embeddings, attention_mask, past_key_value)
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states, present


def prepare_4d_causal_attention_mask(attention_mask, batch_size, query_length, past_key_values_length, dtype, sliding_window=None):
    """[bsz, 1, query_length, past + query_length] additive mask: 0 where a key is seen,
    torch.finfo(dtype).min where it is hidden (future, outside the window, or padding)."""
    min_dtype = torch.finfo(dtype).min
    target_length = past_key_values_length + query_length
    cache_position = torch.arange(past_key_values_length, target_length)
    key_position = torch.arange(target_length)
    hidden = key_position[None, :] > cache_position[:, None]
    if sliding_window is not None:
        hidden = hidden | (key_position[None, :] <= cache_position[:, None] - sliding_window)
    causal_mask = torch.zeros(query_length, target_length, dtype=dtype).masked_fill(hidden, min_dtype)
    causal_mask = causal_mask[None, None, :, :].expand(batch_size, 1, -1, -1).clone()
    if attention_mask is not None:
        padding_mask = attention_mask[:, None, None, :] == 0
        causal_mask = causal_mask.masked_fill(padding_mask, min_dtype)
    return causal_mask


class Starcoder2Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.padding_idx = None
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([Starcoder2DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_epsilon)
        self.rotary_emb = Starcoder2RotaryEmbedding(config)
        self.embedding_dropout = config.embedding_dropout

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None):
        inputs_embeds = self.embed_tokens(input_ids)
        batch_size, seq_length = input_ids.shape
        past_seen_tokens = past_key_values[0][0].shape[-2] if past_key_values is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past_seen_tokens, past_seen_tokens + seq_length).unsqueeze(0).expand(batch_size, -1)
        causal_mask = prepare_4d_causal_attention_mask(
            attention_mask, batch_size, seq_length, past_seen_tokens, inputs_embeds.dtype, self.config.sliding_window
        )
        hidden_states = inputs_embeds
        hidden_states = nn.functional.dropout(hidden_states, p=self.embedding_dropout, training=self.training)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)

        next_cache = []
        for i, decoder_layer in enumerate(self.layers):
            layer_past = past_key_values[i] if past_key_values is not None else None
            hidden_states, present = decoder_layer(hidden_states, position_embeddings, causal_mask, layer_past)
            next_cache.append(present)

        hidden_states = self.norm(hidden_states)
        return hidden_states, tuple(next_cache)


class Starcoder2ForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = Starcoder2Model(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None):
        hidden_states, past = self.model(input_ids, attention_mask, position_ids, past_key_values)
        logits = self.lm_head(hidden_states)
        return logits, past


class Starcoder2Sublayer(nn.Module):
    """One attention module or one decoder layer, with the model's mask and rotary glue."""

    def __init__(self, config, kind):
        super().__init__()
        self.config = config
        self.rotary_emb = Starcoder2RotaryEmbedding(config)
        self.layer = Starcoder2Attention(config) if kind == "attention" else Starcoder2DecoderLayer(config)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None):
        batch_size, seq_length = hidden_states.shape[:2]
        past_seen_tokens = past_key_value[0].shape[-2] if past_key_value is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past_seen_tokens, past_seen_tokens + seq_length).unsqueeze(0).expand(batch_size, -1)
        causal_mask = prepare_4d_causal_attention_mask(
            attention_mask, batch_size, seq_length, past_seen_tokens, hidden_states.dtype, self.config.sliding_window
        )
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        return self.layer(hidden_states, position_embeddings, causal_mask, past_key_value)


# ---- the adapter
from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions

SLIDING_WINDOW = 8


def hf_config(config):
    return Starcoder2Config(
        vocab_size=config.vocab_size, hidden_size=config.d_model, intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads or config.n_heads, max_position_embeddings=config.max_len,
        sliding_window=SLIDING_WINDOW,
    )


def _tensor(a, dtype=None):
    t = torch.as_tensor(a)
    return t if dtype is None else t.to(dtype)


def _attention_mask(key_padding):
    return None if key_padding is None else _tensor(key_padding).long()


def _positions(positions):
    return None if positions is None else _tensor(positions).long()


def sublayer_forward(module, x, key_padding=None, positions=None):
    out, _ = module(x, _attention_mask(key_padding), _positions(positions))
    return out


def sublayer_step(module, cache, x, key_padding=None, positions=None):
    out, present = module(x, _attention_mask(key_padding), _positions(positions), cache)
    return out, present


def lm_forward(module, ids, key_padding=None, positions=None):
    logits, _ = module(_tensor(ids).long(), _attention_mask(key_padding), _positions(positions))
    return logits


def lm_step(module, cache, ids, key_padding=None, positions=None):
    logits, past = module(_tensor(ids).long(), _attention_mask(key_padding), _positions(positions), cache)
    return logits, past


ATTN = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj"}


def attention_map(prefix, theirs):
    return {f"{prefix}{c}.{p}": f"{theirs}{t}.{p}" for c, t in ATTN.items() for p in ("weight", "bias")}


def block_map(prefix, theirs):
    m = attention_map(f"{prefix}self_attn.", f"{theirs}self_attn.")
    for c, t in {"norm1": "input_layernorm", "norm2": "post_attention_layernorm", "ffn.fc1": "mlp.c_fc", "ffn.fc2": "mlp.c_proj"}.items():
        m |= {f"{prefix}{c}.{p}": f"{theirs}{t}.{p}" for p in ("weight", "bias")}
    return m


def lm_map(config):
    m = {"embedding.weight": "model.embed_tokens.weight"}
    for i in range(config.n_layers):
        m |= block_map(f"layers.{i}.", f"model.layers.{i}.")
    m |= {f"norm.{p}": f"model.norm.{p}" for p in ("weight", "bias")}
    return m


DECODER = Conventions(
    norm_placement="pre", activation="gelu_tanh", embedding_scale="none", positions="rope",
    rope_layout="half_split", sliding_window=SLIDING_WINDOW, fully_masked_rows="uniform",
)
GQA = ConfigSpace(fixed={"n_heads": 4, "n_kv_heads": 2}, split_heads=True, max_len=512)

adapter = TorchModuleAdapter("starcoder2-decoder", [
    TorchEntry(
        "layer_norm",
        make=lambda config: nn.LayerNorm(config.d_model, eps=1e-5),
        forward=lambda module, x: module(x),
        conventions=Conventions(eps=1e-5),
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: Starcoder2Sublayer(hf_config(config), "attention"),
        forward=sublayer_forward,
        step=sublayer_step,
        derives_positions=True,
        param_map=attention_map("", "layer."),
        conventions=DECODER,
        supports=GQA,
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: Starcoder2Sublayer(hf_config(config), "block"),
        forward=sublayer_forward,
        step=sublayer_step,
        derives_positions=True,
        param_map=block_map("", "layer."),
        conventions=DECODER,
        supports=GQA,
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: Starcoder2ForCausalLM(hf_config(config)),
        forward=lm_forward,
        step=lm_step,
        derives_positions=True,
        param_map=lm_map,
        conventions=DECODER,
        supports=ConfigSpace(fixed={"n_heads": 4, "n_kv_heads": 2}, split_heads=True, max_len=512, tied=True),
    ),
])
