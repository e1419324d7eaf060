# fmt: off
# ruff: noqa
"""A decoder-only model written the way transformers' remote-code InternLM2 writes it
(`modeling_internlm2.py`): one fused `wqkv` linear whose output is viewed as
(batch, seq, num_key_value_heads, num_key_value_groups + 2, head_dim) -- each kv group's
queries, then its key, then its value --, grouped-query attention through `repeat_kv`,
`rotate_half` RoPE with a cos/sin cache indexed by `position_ids`, `InternLM2RMSNorm` with
float32 statistics, SwiGLU `w2(act(w1(x)) * w3(x))`, `attention_norm` / `ffn_norm`, an untied
`output`, the causal mask an additive `finfo.min` bias (`_make_causal_mask` / `_expand_mask`),
and a cache of per-layer (key, value) tensors concatenated along the sequence.

The fused weight is held as [num_key_value_heads, num_key_value_groups + 2, head_dim, hidden]
(the same memory as InternLM2's [(H_kv (g + 2) head_dim), hidden] Linear weight, viewed flat in
`forward`), so that the spec's q, k and v projections are slices of it (see the adapter).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


class InternLM2Config:
    def __init__(self, vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                 rms_norm_eps=1e-6, rope_theta=1000000.0, bias=False):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.bias = bias


def _make_causal_mask(input_ids_shape, dtype, device, past_key_values_length=0):
    bsz, tgt_len = input_ids_shape
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, dtype=dtype, device=device)
    mask_cond = torch.arange(mask.size(-1), device=device)
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)
    if past_key_values_length > 0:
        mask = torch.cat([torch.zeros(tgt_len, past_key_values_length, dtype=dtype, device=device), mask], dim=-1)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)


def _expand_mask(mask, dtype, tgt_len=None):
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len
    expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted_mask = 1.0 - expanded_mask
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


def _prepare_decoder_attention_mask(attention_mask, input_shape, dtype, device, past_key_values_length):
    combined_attention_mask = _make_causal_mask(input_shape, dtype, device, past_key_values_length=past_key_values_length)
    if attention_mask is not None:
        expanded_attn_mask = _expand_mask(attention_mask, dtype, tgt_len=input_shape[-1])
        combined_attention_mask = expanded_attn_mask + combined_attention_mask
    return combined_attention_mask


class InternLM2RMSNorm(nn.Module):
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


class InternLM2RotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=2048, base=10000, device=None):
        super().__init__()
        self.dim = dim
        self.max_position_embeddings = max_position_embeddings
        self.base = base
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.float64) / self.dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._set_cos_sin_cache(seq_len=max_position_embeddings)

    def _set_cos_sin_cache(self, seq_len):
        self.max_seq_len_cached = seq_len
        t = torch.arange(self.max_seq_len_cached, dtype=self.inv_freq.dtype)
        freqs = torch.einsum("i,j->ij", t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, x, seq_len=None):
        return (self.cos_cached.to(dtype=x.dtype), self.sin_cached.to(dtype=x.dtype))


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids, unsqueeze_dim=1):
    cos = cos[position_ids].unsqueeze(unsqueeze_dim)
    sin = sin[position_ids].unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class InternLM2MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.w1 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.w3 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.w2 = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        down_proj = self.w2(self.act_fn(self.w1(x)) * self.w3(x))
        return down_proj


class GroupedQKV(nn.Module):
    """InternLM2's `wqkv` Linear, its weight viewed [H_kv, g + 2, head_dim, hidden]."""

    def __init__(self, hidden_size, num_key_value_heads, num_key_value_groups, head_dim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_key_value_heads, num_key_value_groups + 2, head_dim, hidden_size))
        self.bias = nn.Parameter(torch.zeros(num_key_value_heads, num_key_value_groups + 2, head_dim)) if bias else None
        nn.init.normal_(self.weight, std=hidden_size ** -0.5)

    def forward(self, x):
        bias = None if self.bias is None else self.bias.flatten()
        return F.linear(x, self.weight.flatten(0, 2), bias)


class InternLM2Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.hidden_size // self.num_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.max_position_embeddings = config.max_position_embeddings
        self.wqkv = GroupedQKV(self.hidden_size, self.num_key_value_heads, self.num_key_value_groups, self.head_dim, config.bias)
        self.wo = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=config.bias)
        self.rotary_emb = InternLM2RotaryEmbedding(self.head_dim, max_position_embeddings=self.max_position_embeddings, base=self.config.rope_theta)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None, use_cache=False):
        bsz, q_len, _ = hidden_states.size()
        qkv_states = self.wqkv(hidden_states)
        qkv_states = qkv_states.view(bsz, q_len, self.num_key_value_heads, 2 + self.num_key_value_groups, self.head_dim)
        query_states = qkv_states[..., : self.num_key_value_groups, :].reshape(bsz, q_len, self.num_heads, self.head_dim)
        key_states = qkv_states[..., -2, :]
        value_states = qkv_states[..., -1, :]
        query_states = query_states.transpose(1, 2)
        key_states = key_states.transpose(1, 2)
        value_states = value_states.transpose(1, 2)

        cos, sin = self.rotary_emb(value_states)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin, position_ids)

        if past_key_value is not None:
            key_states = torch.cat([past_key_value[0], key_states], dim=2)
            value_states = torch.cat([past_key_value[1], value_states], dim=2)
        past_key_value = (key_states, value_states) if use_cache else None

        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)

        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.promote_types(attn_weights.dtype, torch.float32)).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, self.hidden_size)
        attn_output = self.wo(attn_output)
        return attn_output, past_key_value


class InternLM2DecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.attention = InternLM2Attention(config=config)
        self.feed_forward = InternLM2MLP(config)
        self.attention_norm = InternLM2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.ffn_norm = InternLM2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None, use_cache=False):
        residual = hidden_states
        hidden_states = self.attention_norm(hidden_states)
        hidden_states, present_key_value = self.attention(
            hidden_states=hidden_states, attention_mask=attention_mask, position_ids=position_ids,
            past_key_value=past_key_value, use_cache=use_cache,
        )
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.ffn_norm(hidden_states)
        hidden_states = self.feed_forward(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states, present_key_value


def prepare_inputs(hidden_states, attention_mask, position_ids, past_key_values_length):
    """InternLM2Model.forward's bookkeeping: position ids from the cache length, the 4-D mask."""
    batch_size, seq_length = hidden_states.shape[:2]
    if position_ids is None:
        position_ids = torch.arange(past_key_values_length, seq_length + past_key_values_length, dtype=torch.long, device=hidden_states.device)
        position_ids = position_ids.unsqueeze(0)
    attention_mask = _prepare_decoder_attention_mask(
        attention_mask, (batch_size, seq_length), hidden_states.dtype, hidden_states.device, past_key_values_length
    )
    return attention_mask, position_ids


class InternLM2Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([InternLM2DecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = InternLM2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        past_key_values_length = 0
        if past_key_values is not None:
            past_key_values_length = past_key_values[0][0].shape[2]
        inputs_embeds = self.tok_embeddings(input_ids)
        attention_mask, position_ids = prepare_inputs(inputs_embeds, attention_mask, position_ids, past_key_values_length)
        hidden_states = inputs_embeds
        next_decoder_cache = () if use_cache else None
        for idx, decoder_layer in enumerate(self.layers):
            past_key_value = past_key_values[idx] if past_key_values is not None else None
            hidden_states, present = decoder_layer(
                hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                past_key_value=past_key_value, use_cache=use_cache,
            )
            if use_cache:
                next_decoder_cache += (present,)
        hidden_states = self.norm(hidden_states)
        return hidden_states, next_decoder_cache


class InternLM2ForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = InternLM2Model(config)
        self.vocab_size = config.vocab_size
        self.output = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        hidden_states, past_key_values = self.model(
            input_ids, attention_mask=attention_mask, position_ids=position_ids,
            past_key_values=past_key_values, use_cache=use_cache,
        )
        logits = self.output(hidden_states)
        return logits, past_key_values


# ---- the adapter ----------------------------------------------------------------------------

from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def _internlm2_config(config):
    return InternLM2Config(
        vocab_size=config.vocab_size, hidden_size=config.d_model, intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads or config.n_heads, max_position_embeddings=config.max_len,
    )


def _mask(key_padding):
    return None if key_padding is None else torch.as_tensor(key_padding)


def _block_params(config, prefix=""):
    g = config.n_heads // (config.n_kv_heads or config.n_heads)
    fused = f"{prefix}attention.wqkv.weight"
    return {
        "self_attn.q.weight": Param(fused, slice=(1, 0, g)),
        "self_attn.k.weight": Param(fused, slice=(1, g, g + 1)),
        "self_attn.v.weight": Param(fused, slice=(1, g + 1, g + 2)),
        "self_attn.o.weight": f"{prefix}attention.wo.weight",
        "norm1.weight": f"{prefix}attention_norm.weight",
        "ffn.gate.weight": f"{prefix}feed_forward.w1.weight",
        "ffn.up.weight": f"{prefix}feed_forward.w3.weight",
        "ffn.down.weight": f"{prefix}feed_forward.w2.weight",
        "norm2.weight": f"{prefix}ffn_norm.weight",
    }


def _attention_params(config):
    return {k.removeprefix("self_attn."): v for k, v in _block_params(config).items() if k.startswith("self_attn.")}


def _lm_params(config):
    out = {"embedding.weight": "model.tok_embeddings.weight", "norm.weight": "model.norm.weight", "lm_head.weight": "output.weight"}
    for i in range(config.n_layers):
        out |= {f"layers.{i}.{k}": v for k, v in _block_params(config, f"model.layers.{i}.").items()}
    return out


class AttentionOnly(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = InternLM2Attention(config)

    def forward(self, x, key_padding=None, positions=None, cache=None):
        past = 0 if cache is None else cache[0].shape[2]
        mask, position_ids = prepare_inputs(x, _mask(key_padding), None if positions is None else torch.as_tensor(positions), past)
        return self.attention(x, attention_mask=mask, position_ids=position_ids, past_key_value=cache, use_cache=True)


class BlockOnly(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = InternLM2DecoderLayer(config)

    def forward(self, x, key_padding=None, positions=None, cache=None):
        past = 0 if cache is None else cache[0].shape[2]
        mask, position_ids = prepare_inputs(x, _mask(key_padding), None if positions is None else torch.as_tensor(positions), past)
        return self.layer(x, attention_mask=mask, position_ids=position_ids, past_key_value=cache, use_cache=True)


def _prefixed(mapping, prefix):
    return {k: (Param(prefix + v.name, v.slice, v.permute, v.shape) if isinstance(v, Param) else prefix + v) for k, v in mapping.items()}


def _lm_step(model, cache, ids, key_padding=None, positions=None):
    logits, cache = model(torch.as_tensor(ids), attention_mask=_mask(key_padding),
                          position_ids=None if positions is None else torch.as_tensor(positions),
                          past_key_values=cache, use_cache=True)
    return logits, cache


def _module_step(module, cache, x, key_padding=None, positions=None):
    return module(x, key_padding=key_padding, positions=positions, cache=cache)


DECODER = Conventions(
    norm_placement="pre", norm_kind="rms_norm", eps=1e-6, positions="rope", rope_layout="half_split",
    pe_base=1000000.0, ffn_kind="gated", gate_activation="silu", embedding_scale="none",
    fully_masked_rows="undefined", float32_steps=("norm_statistics",),
)
SPACE = dict(fixed={"n_heads": 4, "n_kv_heads": 2}, split_heads=True, max_len=512, biases={"attention": False, "ffn": False})

adapter = TorchModuleAdapter("internlm2-decoder", [
    TorchEntry(
        "rms_norm",
        make=lambda config: InternLM2RMSNorm(config.d_model, eps=1e-6),
        forward=lambda norm, x: norm(x),
        conventions=Conventions(norm_kind="rms_norm", eps=1e-6, float32_steps=("norm_statistics",)),
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: AttentionOnly(_internlm2_config(config)),
        forward=lambda m, x, key_padding=None, positions=None: m(x, key_padding, positions)[0],
        param_map=_attention_params,
        conventions=DECODER,
        step=_module_step,
        derives_positions=True,
        supports=ConfigSpace(**SPACE),
    ),
    TorchEntry(
        "gated_ffn",
        make=lambda config: InternLM2MLP(_internlm2_config(config)),
        forward=lambda mlp, x: mlp(x),
        param_map={"gate.weight": "w1.weight", "up.weight": "w3.weight", "down.weight": "w2.weight"},
        conventions=Conventions(ffn_kind="gated", gate_activation="silu"),
        supports=ConfigSpace(biases={"ffn": False}),
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: BlockOnly(_internlm2_config(config)),
        forward=lambda m, x, key_padding=None, positions=None: m(x, key_padding, positions)[0],
        param_map=lambda config: _prefixed(_block_params(config), "layer."),
        conventions=DECODER,
        step=_module_step,
        derives_positions=True,
        supports=ConfigSpace(**SPACE),
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: InternLM2ForCausalLM(_internlm2_config(config)),
        forward=lambda m, ids, key_padding=None, positions=None: m(
            ids, attention_mask=_mask(key_padding), position_ids=None if positions is None else positions
        )[0],
        param_map=_lm_params,
        conventions=DECODER,
        step=_lm_step,
        derives_positions=True,
        supports=ConfigSpace(**SPACE, tied=False),
    ),
])
