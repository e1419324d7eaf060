# fmt: off
# ruff: noqa
"""A Llama-style decoder run on a batch PACKED INTO ONE ROW, the way users of FlashAttention's
``flash_attn_varlen_func`` write it, in plain torch (no flash-attn kernel).

Every row of the batch loses its padding (``unpad_input``, as ``flash_attn.bert_padding``
does it) and the rows are concatenated into one packed sequence of ``total`` tokens;
``cu_seqlens`` (int32, cumulative lengths starting at 0) marks where each sequence begins.
Attention is ``varlen_attention``: a block-diagonal causal mask built from ``cu_seqlens_q`` and
``cu_seqlens_k`` (a query sees the keys of its own sequence up to its own position, aligned
bottom-right when keys outnumber queries), GQA heads repeated in place, softmax in at least
float32. Positions restart at 0 in every sequence (``position_ids`` from ``cu_seqlens``),
offset by the tokens each sequence has cached. RMSNorm, RoPE in the GPT-NeoX / Hugging Face
``rotate_half`` layout (pairs (i, i + d/2)), SwiGLU (``w2(silu(w1(x)) * w3(x))``), no biases,
an untied ``output`` head. Outputs are scattered back to ``(batch, seq, ...)`` by
``pad_input`` (zeros at the pads). The KV cache keeps, per layer, one (keys, values) pair per
sequence (keys rotated), and each step packs the new tokens against every cached key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelArgs:
    dim: int = 32
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 40
    hidden_dim: int = 64
    norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_seq_len: int = 512


# ---- packing (flash_attn.bert_padding's unpad_input / pad_input, in plain torch)


def unpad_input(hidden_states, attention_mask):
    """[B, L, ...] and a keep-mask [B, L] -> the real tokens packed [total, ...], their flat
    indices, cu_seqlens [B + 1] (int32) and the longest sequence."""
    seqlens_in_batch = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = int(seqlens_in_batch.max().item()) if seqlens_in_batch.numel() else 0
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    packed = hidden_states.reshape(-1, *hidden_states.shape[2:])[indices]
    return packed, indices, cu_seqlens, max_seqlen_in_batch


def pad_input(hidden_states, indices, batch, seqlen):
    """The inverse of unpad_input: packed rows scattered back to [B, L, ...], zeros at pads."""
    output = hidden_states.new_zeros(batch * seqlen, *hidden_states.shape[1:])
    output[indices] = hidden_states
    return output.view(batch, seqlen, *hidden_states.shape[1:])


def sequence_ids(cu_seqlens):
    """For every packed token, the index of the sequence it belongs to."""
    seqlens = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    return torch.repeat_interleave(torch.arange(seqlens.numel(), device=cu_seqlens.device), seqlens)


def position_ids_from_cu_seqlens(cu_seqlens, past_lengths):
    """Positions restarted at 0 in every sequence, after the tokens it has cached."""
    seq = sequence_ids(cu_seqlens)
    local = torch.arange(seq.numel(), device=cu_seqlens.device) - cu_seqlens.long()[:-1][seq]
    return local + past_lengths[seq]


@dataclass
class VarlenBatch:
    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    positions: torch.Tensor
    max_seqlen_q: int


def varlen_causal_mask(cu_seqlens_q, cu_seqlens_k):
    """[total_q, total_k] True where a packed query may attend a packed key: the same
    sequence, and the key not after the query (bottom-right: the queries are a sequence's
    last tokens)."""
    seqlens_q = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).long()
    seqlens_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).long()
    seq_q, seq_k = sequence_ids(cu_seqlens_q), sequence_ids(cu_seqlens_k)
    pos_q = torch.arange(seq_q.numel()) - cu_seqlens_q.long()[:-1][seq_q] + (seqlens_k - seqlens_q)[seq_q]
    pos_k = torch.arange(seq_k.numel()) - cu_seqlens_k.long()[:-1][seq_k]
    same_sequence = seq_q[:, None] == seq_k[None, :]
    return same_sequence & (pos_k[None, :] <= pos_q[:, None])


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale):
    """flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, ..., causal=True) in torch:
    q [total_q, H, d], k and v [total_k, H_kv, d] -> [total_q, H, d]."""
    n_rep = q.shape[1] // k.shape[1]
    k, v = torch.repeat_interleave(k, n_rep, dim=1), torch.repeat_interleave(v, n_rep, dim=1)
    compute = torch.promote_types(q.dtype, torch.float32)
    scores = torch.einsum("qhd,khd->hqk", q.to(compute), k.to(compute)) * softmax_scale
    allowed = varlen_causal_mask(cu_seqlens_q, cu_seqlens_k)
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v.to(compute)).to(q.dtype)


# ---- the model


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        h = x.to(torch.promote_types(x.dtype, torch.float32))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rope_cos_sin(positions, head_dim, theta, dtype):
    """cos and sin [total, head_dim] at each packed token's position (rotate_half layout)."""
    compute = torch.promote_types(dtype, torch.float32)
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=compute) / head_dim))
    freqs = positions.to(compute)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_emb(q, k, cos, sin):
    """q [total, H, d], k [total, H_kv, d]; cos, sin [total, d]."""
    cos, sin = cos[:, None, :], sin[:, None, :]
    q_embed = (q.to(cos.dtype) * cos) + (rotate_half(q.to(cos.dtype)) * sin)
    k_embed = (k.to(cos.dtype) * cos) + (rotate_half(k.to(cos.dtype)) * sin)
    return q_embed.to(q.dtype), k_embed.to(k.dtype)


def update_kv_cache(k, v, batch, layer_cache):
    """Each sequence's new keys and values appended to its cached ones; the packed keys and
    values of every sequence (ordered as cu_seqlens_k) and the new cache."""
    seqlens_q = (batch.cu_seqlens_q[1:] - batch.cu_seqlens_q[:-1]).tolist()
    new_k = torch.split(k, seqlens_q, dim=0)
    new_v = torch.split(v, seqlens_q, dim=0)
    if layer_cache is None:
        keys, values = list(new_k), list(new_v)
    else:
        keys = [torch.cat([past, new], dim=0) for past, new in zip(layer_cache[0], new_k)]
        values = [torch.cat([past, new], dim=0) for past, new in zip(layer_cache[1], new_v)]
    return torch.cat(keys, dim=0), torch.cat(values, dim=0), (keys, values)


class Attention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.n_heads = args.n_heads
        self.n_kv_heads = args.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.rope_theta = args.rope_theta
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def forward(self, x, batch, layer_cache=None):
        total = x.shape[0]
        xq = self.wq(x).view(total, self.n_heads, self.head_dim)
        xk = self.wk(x).view(total, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(total, self.n_kv_heads, self.head_dim)
        cos, sin = rope_cos_sin(batch.positions, self.head_dim, self.rope_theta, x.dtype)
        xq, xk = apply_rotary_emb(xq, xk, cos, sin)
        keys, values, layer_cache = update_kv_cache(xk, xv, batch, layer_cache)
        out = varlen_attention(xq, keys, values, batch.cu_seqlens_q, batch.cu_seqlens_k, self.head_dim ** -0.5)
        return self.wo(out.reshape(total, self.n_heads * self.head_dim)), layer_cache


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, args.hidden_dim)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, batch, layer_cache=None):
        attn_out, layer_cache = self.attention(self.attention_norm(x), batch, layer_cache)
        h = x + attn_out
        out = h + self.feed_forward(self.ffn_norm(h))
        return out, layer_cache


class PackedTransformer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)

    def forward(self, tokens, batch, cache=None):
        h = self.tok_embeddings(tokens)
        new_cache = []
        for i, layer in enumerate(self.layers):
            h, layer_cache = layer(h, batch, None if cache is None else cache[i])
            new_cache.append(layer_cache)
        h = self.norm(h)
        return self.output(h), new_cache


def packed_call(module, inputs, key_padding=None, cache=None):
    """Unpad a [B, L, ...] batch into one packed row, run ``module`` on it with the varlen
    metadata, and pad the output back. ``cache``: {"lengths": [B] tokens cached per sequence,
    "layers": the module's own cache}; ``key_padding`` covers the cached and the new tokens."""
    batch_size, seqlen = inputs.shape[0], inputs.shape[1]
    if key_padding is None:
        key_padding = torch.ones(batch_size, seqlen, dtype=torch.bool)
    keep = key_padding[:, -seqlen:]
    packed, indices, cu_seqlens_q, max_seqlen_q = unpad_input(inputs, keep)
    seqlens_q = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).long()
    past = torch.zeros(batch_size, dtype=torch.long) if cache is None else cache["lengths"]
    cu_seqlens_k = F.pad(torch.cumsum(past + seqlens_q, dim=0, dtype=torch.int32), (1, 0))
    positions = position_ids_from_cu_seqlens(cu_seqlens_q, past)
    batch = VarlenBatch(cu_seqlens_q, cu_seqlens_k, positions, max_seqlen_q)
    out, layers = module(packed, batch, None if cache is None else cache["layers"])
    return pad_input(out, indices, batch_size, seqlen), {"lengths": past + seqlens_q, "layers": layers}


# ---- the adapter

from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def model_args(config):
    return ModelArgs(
        dim=config.d_model, n_layers=config.n_layers, n_heads=config.n_heads,
        n_kv_heads=config.n_kv_heads or config.n_heads, vocab_size=config.vocab_size,
        hidden_dim=config.d_ff, max_seq_len=config.max_len,
    )


def _mask(key_padding):
    return None if key_padding is None else torch.as_tensor(key_padding, dtype=torch.bool)


def _check_length(length, config_len):
    if length > config_len:
        raise ValueError(f"{length} tokens: longer than max_seq_len {config_len}")


def forward_x(module, x, key_padding=None, positions=None):
    # positions are not read: they are derived from cu_seqlens (restarted at 0 in every sequence)
    _check_length(x.shape[1], module.args.max_seq_len)
    return packed_call(module, x, _mask(key_padding))[0]


def step_x(module, cache, x, key_padding=None, positions=None):
    seen = 0 if cache is None else cache["seen"]
    _check_length(seen + x.shape[1], module.args.max_seq_len)
    out, cache = packed_call(module, x, _mask(key_padding), cache)
    return out, {**cache, "seen": seen + x.shape[1]}


def forward_ids(module, ids, key_padding=None, positions=None):
    return forward_x(module, torch.as_tensor(ids, dtype=torch.long), key_padding)


def step_ids(module, cache, ids, key_padding=None, positions=None):
    return step_x(module, cache, torch.as_tensor(ids, dtype=torch.long), key_padding)


def make_attention(config):
    module = Attention(model_args(config))
    module.args = model_args(config)
    return module


def make_block(config):
    module = TransformerBlock(model_args(config))
    module.args = model_args(config)
    return module


def make_lm(config):
    return PackedTransformer(model_args(config))


ATTN = {"q": "wq", "k": "wk", "v": "wv", "o": "wo"}
ATTN_MAP = {f"{c}.weight": f"{m}.weight" for c, m in ATTN.items()}
BLOCK_MAP = {f"self_attn.{c}": f"attention.{m}" for c, m in ATTN_MAP.items()}
BLOCK_MAP |= {"norm1.weight": "attention_norm.weight", "norm2.weight": "ffn_norm.weight"}
BLOCK_MAP |= {f"ffn.{c}.weight": f"feed_forward.{m}.weight" for c, m in (("gate", "w1"), ("up", "w3"), ("down", "w2"))}


def lm_map(config):
    names = {"embedding.weight": "tok_embeddings.weight", "norm.weight": "norm.weight", "lm_head.weight": "output.weight"}
    for i in range(config.n_layers):
        names |= {f"layers.{i}.{c}": f"layers.{i}.{m}" for c, m in BLOCK_MAP.items()}
    return names


LLAMA = Conventions(
    norm_placement="pre", norm_kind="rms_norm", eps=1e-6, positions="rope", rope_layout="half_split",
    ffn_kind="gated", gate_activation="silu", embedding_scale="none", final_norm="pre_only",
    fully_masked_rows="zero",
)
NO_BIAS = {"attention": False, "ffn": False}
SPACE = ConfigSpace(fixed={"n_kv_heads": 2}, choices={"n_heads": (4, 2, 8)}, split_heads=True, max_len=512, biases=NO_BIAS)

adapter = TorchModuleAdapter("packed-llama", [
    TorchEntry("rms_norm", make=lambda config: RMSNorm(config.d_model, eps=1e-6),
               forward=lambda norm, x: norm(x),
               conventions=Conventions(norm_kind="rms_norm", eps=1e-6)),
    TorchEntry("causal_self_attention", make=make_attention, forward=forward_x, step=step_x,
               param_map=ATTN_MAP, conventions=LLAMA, derives_positions=True, supports=SPACE),
    TorchEntry("decoder_block", make=make_block, forward=forward_x, step=step_x,
               param_map=BLOCK_MAP, conventions=LLAMA, derives_positions=True, supports=SPACE),
    TorchEntry("causal_lm", make=make_lm, forward=forward_ids, step=step_ids,
               param_map=lm_map, conventions=LLAMA, derives_positions=True,
               supports=ConfigSpace(fixed={"n_kv_heads": 2}, choices={"n_heads": (4, 2, 8)}, split_heads=True, max_len=512, biases=NO_BIAS, tied=False)),
])
