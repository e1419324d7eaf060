# fmt: off
# ruff: noqa
"""A decoder as transformers' GPT-NeoX writes it (``models/gpt_neox/modeling_gpt_neox.py``),
with ``rotary_pct = 1.0`` (every channel of a head is rotated) and ``use_parallel_residual =
False`` (the sequential residual of GPT-2 and Llama, not Pythia's parallel one): ONE fused
``query_key_value`` linear whose output is viewed as ``(batch, seq, heads, 3 * head_size)``
and split per head into q, k, v (the checkpoint's per-head interleaved layout), rotate_half
RoPE, LayerNorms with bias, a GELU MLP ``dense_h_to_4h`` / ``dense_4h_to_h``, the causal mask
an additive ``finfo.min`` bias, ``final_layer_norm``, an untied ``embed_out``, and a cache of
per-layer ``(key, value)`` tensors concatenated along the sequence.

Written for the twenty-first blind benchmark (tests/blind21).
"""

import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def neox_config(config):
    return SimpleNamespace(
        hidden_size=config.d_model,
        num_attention_heads=config.n_heads,
        intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers,
        vocab_size=config.vocab_size,
        rotary_pct=1.0,
        rotary_emb_base=10000,
        layer_norm_eps=1e-5,
        use_parallel_residual=False,
    )


class FusedQKV(nn.Module):
    """``query_key_value = nn.Linear(hidden, 3 * hidden)``; its weight is held in the view the
    forward splits it by, ``[heads, 3 * head_size, hidden]`` (rows q_h, k_h, v_h per head)."""

    def __init__(self, hidden_size, num_heads):
        super().__init__()
        head_size = hidden_size // num_heads
        linear = nn.Linear(hidden_size, 3 * hidden_size)
        self.weight = nn.Parameter(linear.weight.detach().reshape(num_heads, 3 * head_size, hidden_size).clone())
        self.bias = nn.Parameter(linear.bias.detach().reshape(num_heads, 3 * head_size).clone())

    def forward(self, x):
        return F.linear(x, self.weight.flatten(0, 1), self.bias.flatten())


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


class GPTNeoXRotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000):
        super().__init__()
        self.dim = dim
        self.base = base

    def forward(self, x, position_ids):
        wide = torch.promote_types(x.dtype, torch.float32)
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=wide, device=x.device) / self.dim))
        freqs = position_ids[..., None].to(wide) * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class GPTNeoXAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.hidden_size = config.hidden_size
        self.head_size = self.hidden_size // self.num_attention_heads
        self.rotary_ndims = int(self.head_size * config.rotary_pct)
        self.rotary_emb = GPTNeoXRotaryEmbedding(self.rotary_ndims, config.rotary_emb_base)
        self.norm_factor = self.head_size ** -0.5
        self.query_key_value = FusedQKV(config.hidden_size, config.num_attention_heads)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, attention_mask, position_ids, layer_past=None):
        bsz, q_len, _ = hidden_states.shape
        qkv = self.query_key_value(hidden_states)
        qkv = qkv.view(bsz, q_len, self.num_attention_heads, 3 * self.head_size)
        query = qkv[..., : self.head_size].permute(0, 2, 1, 3)
        key = qkv[..., self.head_size : 2 * self.head_size].permute(0, 2, 1, 3)
        value = qkv[..., 2 * self.head_size :].permute(0, 2, 1, 3)

        query_rot = query[..., : self.rotary_ndims]
        query_pass = query[..., self.rotary_ndims :]
        key_rot = key[..., : self.rotary_ndims]
        key_pass = key[..., self.rotary_ndims :]
        cos, sin = self.rotary_emb(value, position_ids)
        query_rot, key_rot = apply_rotary_pos_emb(query_rot, key_rot, cos, sin)
        query = torch.cat((query_rot, query_pass), dim=-1)
        key = torch.cat((key_rot, key_pass), dim=-1)

        if layer_past is not None:
            past_key, past_value = layer_past
            key = torch.cat((past_key, key), dim=-2)
            value = torch.cat((past_value, value), dim=-2)
        present = (key, value)

        attn_output = self._attn(query, key, value, attention_mask)
        attn_output = attn_output.permute(0, 2, 1, 3).reshape(bsz, q_len, self.hidden_size)
        return self.dense(attn_output), present

    def _attn(self, query, key, value, attention_mask):
        wide = torch.promote_types(query.dtype, torch.float32)
        attn_scores = torch.matmul(query, key.transpose(2, 3)) * self.norm_factor
        attn_scores = attn_scores.to(wide) + attention_mask
        attn_weights = F.softmax(attn_scores, dim=-1).to(value.dtype)
        return torch.matmul(attn_weights, value)


class GPTNeoXMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense_h_to_4h = nn.Linear(config.hidden_size, config.intermediate_size)
        self.dense_4h_to_h = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act = nn.GELU()

    def forward(self, hidden_states):
        hidden_states = self.dense_h_to_4h(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.dense_4h_to_h(hidden_states)
        return hidden_states


class GPTNeoXLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.use_parallel_residual = config.use_parallel_residual
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attention = GPTNeoXAttention(config)
        self.mlp = GPTNeoXMLP(config)

    def forward(self, hidden_states, attention_mask, position_ids, layer_past=None):
        attn_output, present = self.attention(
            self.input_layernorm(hidden_states), attention_mask, position_ids, layer_past
        )
        if self.use_parallel_residual:
            mlp_output = self.mlp(self.post_attention_layernorm(hidden_states))
            hidden_states = mlp_output + attn_output + hidden_states
        else:
            attn_output = attn_output + hidden_states
            mlp_output = self.mlp(self.post_attention_layernorm(attn_output))
            hidden_states = mlp_output + attn_output
        return hidden_states, present


class GPTNeoXModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_in = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([GPTNeoXLayer(config) for _ in range(config.num_hidden_layers)])
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids, key_padding=None, position_ids=None, past_key_values=None):
        inputs_embeds = self.embed_in(input_ids)
        past_length = 0 if past_key_values is None else past_key_values[0][0].shape[-2]
        position_ids = default_positions(inputs_embeds, past_length, position_ids)
        attention_mask = causal_bias(inputs_embeds, key_padding, past_length)
        hidden_states = inputs_embeds
        presents = ()
        for i, layer in enumerate(self.layers):
            layer_past = None if past_key_values is None else past_key_values[i]
            hidden_states, present = layer(hidden_states, attention_mask, position_ids, layer_past)
            presents = presents + (present,)
        hidden_states = self.final_layer_norm(hidden_states)
        return hidden_states, presents


class GPTNeoXForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gpt_neox = GPTNeoXModel(config)
        self.embed_out = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, key_padding=None, position_ids=None, past_key_values=None):
        hidden_states, presents = self.gpt_neox(input_ids, key_padding, position_ids, past_key_values)
        lm_logits = self.embed_out(hidden_states)
        return lm_logits, presents


def default_positions(hidden_states, past_length, position_ids):
    """Position ids as given, else the cache's length onward (transformers' ``cache_position``)."""
    if position_ids is not None:
        return position_ids
    bsz, q_len = hidden_states.shape[:2]
    position_ids = torch.arange(past_length, past_length + q_len, device=hidden_states.device)
    return position_ids.unsqueeze(0).expand(bsz, -1)


def causal_bias(hidden_states, key_padding, past_length):
    """The additive 4-D mask: ``finfo.min`` above the diagonal of the ``(q_len, past + q_len)``
    block and at every padded key, 0 elsewhere (in the dtype the scores are softmaxed in)."""
    bsz, q_len = hidden_states.shape[:2]
    dtype = torch.promote_types(hidden_states.dtype, torch.float32)
    min_dtype = torch.finfo(dtype).min
    target_length = past_length + q_len
    causal_mask = torch.full((q_len, target_length), min_dtype, dtype=dtype, device=hidden_states.device)
    causal_mask = torch.triu(causal_mask, diagonal=past_length + 1)
    causal_mask = causal_mask[None, None, :, :].expand(bsz, 1, -1, -1)
    if key_padding is not None:
        padding_mask = ~key_padding.bool()[:, None, None, :target_length]
        causal_mask = causal_mask.masked_fill(padding_mask, min_dtype)
    return causal_mask


# ---- the adapter ------------------------------------------------------------------------


def attention_map(prefix, mine, config):
    """Canonical q, k, v: for each head, the first, second and third ``head_size`` rows of
    that head's ``3 * head_size`` rows of the fused weight (the view ``[H, 3 * hs, D]``)."""
    hs = config.d_model // config.n_heads
    names = {}
    for i, part in enumerate("qkv"):
        names[f"{prefix}{part}.weight"] = Param(f"{mine}query_key_value.weight", slice=(1, i * hs, (i + 1) * hs))
        names[f"{prefix}{part}.bias"] = Param(f"{mine}query_key_value.bias", slice=(1, i * hs, (i + 1) * hs))
    names[f"{prefix}o.weight"] = f"{mine}dense.weight"
    names[f"{prefix}o.bias"] = f"{mine}dense.bias"
    return names


def block_map(prefix, mine, config):
    names = attention_map(f"{prefix}self_attn.", f"{mine}attention.", config)
    for p in ("weight", "bias"):
        names[f"{prefix}norm1.{p}"] = f"{mine}input_layernorm.{p}"
        names[f"{prefix}norm2.{p}"] = f"{mine}post_attention_layernorm.{p}"
        names[f"{prefix}ffn.fc1.{p}"] = f"{mine}mlp.dense_h_to_4h.{p}"
        names[f"{prefix}ffn.fc2.{p}"] = f"{mine}mlp.dense_4h_to_h.{p}"
    return names


def lm_map(config):
    names = {"embedding.weight": "gpt_neox.embed_in.weight", "lm_head.weight": "embed_out.weight"}
    for i in range(config.n_layers):
        names |= block_map(f"layers.{i}.", f"gpt_neox.layers.{i}.", config)
    names["norm.weight"] = "gpt_neox.final_layer_norm.weight"
    names["norm.bias"] = "gpt_neox.final_layer_norm.bias"
    return names


def attention_forward(attn, x, key_padding=None, positions=None):
    out, _ = attention_step(attn, None, x, key_padding, positions)
    return out


def attention_step(attn, cache, x, key_padding=None, positions=None):
    past_length = 0 if cache is None else cache[0].shape[-2]
    position_ids = default_positions(x, past_length, positions)
    mask = causal_bias(x, key_padding, past_length)
    return attn(x, mask, position_ids, cache)


def block_forward(layer, x, key_padding=None, positions=None):
    out, _ = block_step(layer, None, x, key_padding, positions)
    return out


def block_step(layer, cache, x, key_padding=None, positions=None):
    past_length = 0 if cache is None else cache[0].shape[-2]
    position_ids = default_positions(x, past_length, positions)
    mask = causal_bias(x, key_padding, past_length)
    return layer(x, mask, position_ids, cache)


def lm_forward(model, ids, key_padding=None, positions=None):
    logits, _ = model(ids, key_padding, positions)
    return logits


def lm_step(model, cache, ids, key_padding=None, positions=None):
    return model(ids, key_padding, positions, cache)


DECLARED = Conventions(
    norm_placement="pre",
    activation="gelu",
    embedding_scale="none",
    positions="rope",
    rope_layout="half_split",
    fully_masked_rows="uniform",
)
SPACE = ConfigSpace(split_heads=True)


def make_layer_norm(config):
    return nn.LayerNorm(config.d_model, eps=1e-5)


adapter = TorchModuleAdapter("gptneox-decoder", [
    TorchEntry(
        "layer_norm",
        make=make_layer_norm,
        forward=lambda ln, x: ln(x),
        conventions=Conventions(),
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: GPTNeoXAttention(neox_config(config)),
        forward=attention_forward,
        step=attention_step,
        param_map=lambda config: attention_map("", "", config),
        conventions=DECLARED,
        derives_positions=True,
        supports=SPACE,
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: GPTNeoXLayer(neox_config(config)),
        forward=block_forward,
        step=block_step,
        param_map=lambda config: block_map("", "", config),
        conventions=DECLARED,
        derives_positions=True,
        supports=SPACE,
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: GPTNeoXForCausalLM(neox_config(config)),
        forward=lm_forward,
        step=lm_step,
        param_map=lm_map,
        conventions=DECLARED,
        derives_positions=True,
        supports=ConfigSpace(split_heads=True, tied=False),
    ),
])
