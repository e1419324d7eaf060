# fmt: off
# ruff: noqa: E501  (the bug tables name these lines verbatim; they stay as written)
"""A Transformer encoder for the third blind benchmark, written the way FlashAttention's
variable-length ("unpadded") attention writes one: inside each attention the keys and
values of the padded batch are **unpadded** into one packed sequence of real tokens
[total_k, H, d] (``indices`` of the kept tokens, ``cu_seqlens_k`` the cumulative lengths),
the queries stay dense (``cu_seqlens_q`` steps of L: padded query rows are computed by the
formula), and each sequence's queries attend its own slice of packed keys, as
``flash_attn_varlen_func`` does. Pre-LN, tanh GELU, LayerNorm eps 1e-5, a final LayerNorm;
causal attention, when asked, compares the keys' original indices with the queries'. A
sequence that is all padding has no keys and comes out of attention as zeros
(``fully_masked_rows='zero'``, canonical).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def unpad_input(hidden_states, attention_mask):
    """[B, L, D], keep [B, L] -> packed [total, D], indices [total], cu_seqlens [B + 1]."""
    seqlens_in_batch = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    packed = hidden_states.reshape(-1, hidden_states.shape[-1])[indices]
    return packed, indices, cu_seqlens


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, q_index, k_index, causal):
    """q [total_q, H, d], k, v [total_k, H, d]: sequence b's queries q[cu_seqlens_q[b]:
    cu_seqlens_q[b + 1]] attend only its keys k[cu_seqlens_k[b]:cu_seqlens_k[b + 1]]; a
    sequence without keys gets zeros (flash_attn_varlen_func's contract)."""
    out = q.new_zeros((q.shape[0], q.shape[1], v.shape[-1]))
    softmax_scale = 1.0 / math.sqrt(q.shape[-1])
    for b in range(len(cu_seqlens_q) - 1):
        q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        k0, k1 = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        if k1 == k0:
            continue
        scores = torch.einsum("qhd,khd->hqk", q[q0:q1], k[k0:k1]) * softmax_scale
        if causal:
            hidden = q_index[q0:q1][:, None] < k_index[k0:k1][None, :]
            scores = scores.masked_fill(hidden[None], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        probs = torch.nan_to_num(probs, nan=0.0)
        out[q0:q1] = torch.einsum("hqk,khd->qhd", probs, v[k0:k1])
    return out


class VarlenSelfAttention(nn.Module):
    """Queries dense (every position, padded ones too), keys and values unpadded."""

    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size)
        self.k_proj = nn.Linear(hidden_size, hidden_size)
        self.v_proj = nn.Linear(hidden_size, hidden_size)
        self.out_proj = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states, attention_mask, causal=False):
        batch, seqlen, _ = hidden_states.shape
        kv_states, indices_k, cu_seqlens_k = unpad_input(hidden_states, attention_mask)
        q = self.q_proj(hidden_states).reshape(batch * seqlen, self.num_heads, self.head_dim)
        k = self.k_proj(kv_states).view(-1, self.num_heads, self.head_dim)
        v = self.v_proj(kv_states).view(-1, self.num_heads, self.head_dim)
        cu_seqlens_q = torch.arange(0, (batch + 1) * seqlen, seqlen, device=hidden_states.device)
        q_index = torch.arange(seqlen, device=hidden_states.device).repeat(batch)
        k_index = indices_k % seqlen
        ctx = varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, q_index, k_index, causal)
        return self.out_proj(ctx.reshape(batch, seqlen, self.num_heads * self.head_dim))


class Mlp(nn.Module):
    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.fc1 = nn.Linear(hidden_size, intermediate_size)
        self.fc2 = nn.Linear(intermediate_size, hidden_size)

    def forward(self, hidden_states):
        return self.fc2(F.gelu(self.fc1(hidden_states), approximate="tanh"))


class VarlenLayer(nn.Module):
    def __init__(self, hidden_size, num_heads, intermediate_size, eps=1e-5):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden_size, eps=eps)
        self.mixer = VarlenSelfAttention(hidden_size, num_heads)
        self.norm2 = nn.LayerNorm(hidden_size, eps=eps)
        self.mlp = Mlp(hidden_size, intermediate_size)

    def forward(self, hidden_states, attention_mask, causal=False):
        residual = hidden_states
        hidden_states = residual + self.mixer(self.norm1(hidden_states), attention_mask, causal)
        residual = hidden_states
        hidden_states = residual + self.mlp(self.norm2(hidden_states))
        return hidden_states


class VarlenEncoder(nn.Module):
    def __init__(self, hidden_size, num_heads, intermediate_size, num_layers, eps=1e-5):
        super().__init__()
        self.layers = nn.ModuleList([VarlenLayer(hidden_size, num_heads, intermediate_size, eps) for _ in range(num_layers)])
        self.ln_f = nn.LayerNorm(hidden_size, eps=eps)

    def forward(self, hidden_states, attention_mask, causal=False):
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask, causal)
        return self.ln_f(hidden_states)


# ---- the adapter

CONVENTIONS = Conventions(norm_placement="pre", activation="gelu_tanh")


def _padded_forward(module, x, key_padding=None, causal=False):
    if key_padding is None:
        key_padding = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
    return module(x, key_padding.bool(), causal=bool(causal))


def _layer_map(ours, theirs):
    names = {"self_attn.q": "mixer.q_proj", "self_attn.k": "mixer.k_proj", "self_attn.v": "mixer.v_proj", "self_attn.o": "mixer.out_proj", "norm1": "norm1", "norm2": "norm2", "ffn.fc1": "mlp.fc1", "ffn.fc2": "mlp.fc2"}
    return {f"{ours}{c}.{p}": f"{theirs}{t}.{p}" for c, t in names.items() for p in ("weight", "bias")}


def _encoder_map(config):
    mapping = {"norm.weight": "ln_f.weight", "norm.bias": "ln_f.bias"}
    for i in range(config.n_layers):
        mapping |= _layer_map(f"layers.{i}.", f"layers.{i}.")
    return mapping


adapter = TorchModuleAdapter("blind3-varlen-encoder", [
    TorchEntry(
        "ffn",
        make=lambda c: Mlp(c.d_model, c.d_ff),
        forward=lambda m, x: m(x),
        param_map={f"{n}.{p}": f"{n}.{p}" for n in ("fc1", "fc2") for p in ("weight", "bias")},
        conventions=CONVENTIONS,
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda c: VarlenLayer(c.d_model, c.n_heads, c.d_ff),
        forward=_padded_forward,
        param_map=_layer_map("", ""),
        conventions=CONVENTIONS,
    ),
    TorchEntry(
        "encoder",
        make=lambda c: VarlenEncoder(c.d_model, c.n_heads, c.d_ff, c.n_layers),
        forward=_padded_forward,
        param_map=_encoder_map,
        conventions=CONVENTIONS,
    ),
])
