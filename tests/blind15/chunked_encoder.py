# fmt: off
# ruff: noqa
"""A BERT-like post-LN encoder whose attention is computed the memory-efficient way (Rabe &
Staats 2021, "Self-attention does not need O(n^2) memory"; xformers' memory-efficient
attention): queries in chunks and, for each query chunk, keys in chunks, merged by a running
maximum, a running sum of exponentials and a rescaled accumulator (the online softmax); the full
score matrix is never formed. Key padding is applied inside each key chunk. Explicit nn.Linear
q/k/v/o projections; sinusoidal positions added to sqrt(D)-scaled embeddings.
"""
import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

QUERY_CHUNK = 3
KEY_CHUNK = 4


def sinusoidal_table(positions: torch.Tensor, d_model: int, base: float = 10000.0) -> torch.Tensor:
    pos = positions.to(torch.float64).unsqueeze(-1)
    i = torch.arange(0, d_model, 2, dtype=torch.float64)
    inv_freq = base ** (-i / d_model)
    angles = pos * inv_freq
    table = torch.zeros(*positions.shape, d_model, dtype=torch.float64)
    table[..., 0::2] = torch.sin(angles)
    table[..., 1::2] = torch.cos(angles)
    return table


def key_chunk_keep(keep: Optional[torch.Tensor], q_start: int, q_end: int, k_start: int, k_end: int):
    if keep is None:
        return None
    return keep[..., q_start:q_end, k_start:k_end]


def memory_efficient_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: Optional[torch.Tensor]) -> torch.Tensor:
    """q [B, H, Lq, d], k and v [B, H, Lk, d], keep [B, 1, Lq, Lk] (True = may attend) or None."""
    out_dtype = q.dtype
    acc_dtype = torch.promote_types(q.dtype, torch.float32)  # xformers accumulates in float32
    q, k, v = q.to(acc_dtype), k.to(acc_dtype), v.to(acc_dtype)
    scale = 1.0 / math.sqrt(q.size(-1))
    Lq, Lk = q.size(2), k.size(2)
    chunks = []
    for q_start in range(0, Lq, QUERY_CHUNK):
        q_end = min(q_start + QUERY_CHUNK, Lq)
        q_chunk = q[:, :, q_start:q_end] * scale
        running_max = torch.full((*q_chunk.shape[:-1], 1), float("-inf"), dtype=acc_dtype)
        running_sum = torch.zeros((*q_chunk.shape[:-1], 1), dtype=acc_dtype)
        acc = torch.zeros((*q_chunk.shape[:-1], v.size(-1)), dtype=acc_dtype)
        for k_start in range(0, Lk, KEY_CHUNK):
            k_end = min(k_start + KEY_CHUNK, Lk)
            scores = q_chunk @ k[:, :, k_start:k_end].transpose(-2, -1)
            chunk_keep = key_chunk_keep(keep, q_start, q_end, k_start, k_end)
            if chunk_keep is not None:
                scores = scores.masked_fill(~chunk_keep, float("-inf"))
            new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
            safe_max = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
            exp_scores = torch.exp(scores - safe_max)
            correction = torch.exp(running_max - safe_max)
            running_sum = running_sum * correction + exp_scores.sum(dim=-1, keepdim=True)
            acc = acc * correction + exp_scores @ v[:, :, k_start:k_end]
            running_max = new_max
        denom = torch.where(running_sum == 0, torch.ones_like(running_sum), running_sum)
        chunks.append(acc / denom)  # a query with no key keeps acc = 0: its output is zero
    return torch.cat(chunks, dim=2).to(out_dtype)


class MemoryEfficientSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.output = nn.Linear(d_model, d_model)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        return x.view(B, L, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, query, key, value, keep: Optional[torch.Tensor] = None) -> torch.Tensor:
        B, Lq, D = query.shape
        q = self.split_heads(self.query(query))
        k = self.split_heads(self.key(key))
        v = self.split_heads(self.value(value))
        context = memory_efficient_attention(q, k, v, keep)
        context = context.transpose(1, 2).reshape(B, Lq, D)
        return self.output(context)


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.dense_in = nn.Linear(d_model, d_ff)
        self.dense_out = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.dense_out(F.gelu(self.dense_in(x))))


class EncoderLayer(nn.Module):
    """Post-LN: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, eps: float = 1e-12, dropout: float = 0.1) -> None:
        super().__init__()
        self.attention = MemoryEfficientSelfAttention(d_model, n_heads)
        self.attention_norm = nn.LayerNorm(d_model, eps=eps)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.ffn_norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, keep: Optional[torch.Tensor] = None) -> torch.Tensor:
        attended = self.attention(x, x, x, keep)
        x = self.attention_norm(x + self.dropout(attended))
        x = self.ffn_norm(x + self.ffn(x))
        return x


class Encoder(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, n_layers: int, eps: float = 1e-12) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(d_model, n_heads, d_ff, eps) for _ in range(n_layers))

    def forward(self, x: torch.Tensor, keep: Optional[torch.Tensor] = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, keep)
        return x


class SinusoidalPositions(nn.Module):
    def __init__(self, d_model: int, max_len: int = 512, base: float = 10000.0) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.base = base

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        if positions.numel() and (int(positions.max()) >= self.max_len or int(positions.min()) < 0):
            raise IndexError(f"positions must lie in [0, {self.max_len})")
        return sinusoidal_table(positions, self.d_model, self.base)


class Embeddings(nn.Module):
    """Token embeddings scaled by sqrt(D), plus the sinusoidal table at the positions."""

    def __init__(self, vocab_size: int, d_model: int, padding_idx: Optional[int] = 0, dropout: float = 0.1) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.positions = SinusoidalPositions(d_model)
        self.d_model = d_model
        self.dropout = nn.Dropout(dropout)

    def scaled_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        return self.word_embeddings(ids) * math.sqrt(self.d_model)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.scaled_tokens(ids)
        positions = torch.arange(ids.size(-1), device=ids.device)
        return self.dropout(x + self.positions(positions).to(x.dtype))


def build_keep(Lq: int, Lk: int, key_padding=None, attn_mask=None, causal=None, device=None):
    """The keep-mask [B or 1, 1, Lq, Lk] (True = may attend), or None when nothing is masked."""
    keep = torch.ones(1, 1, Lq, Lk, dtype=torch.bool, device=device)
    if key_padding is not None:
        keep = keep & key_padding[:, None, None, :]
    if attn_mask is not None:
        keep = keep & (attn_mask if attn_mask.dim() == 4 else attn_mask[None, None] if attn_mask.dim() == 2 else attn_mask[:, None])
    if causal is not None and bool(causal):
        keep = keep & torch.ones(Lq, Lk, dtype=torch.bool, device=device).tril()
    return keep


# ---- the adapter
from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions

MHA = {"q": "query", "k": "key", "v": "value", "o": "output"}


def attention_params(prefix: str, canonical: str) -> dict:
    return {f"{canonical}{c}.{p}": f"{prefix}{mine}.{p}" for c, mine in MHA.items() for p in ("weight", "bias")}


def layer_params(prefix: str, canonical: str) -> dict:
    names = attention_params(f"{prefix}attention.", f"{canonical}self_attn.")
    for p in ("weight", "bias"):
        names |= {
            f"{canonical}norm1.{p}": f"{prefix}attention_norm.{p}",
            f"{canonical}ffn.fc1.{p}": f"{prefix}ffn.dense_in.{p}",
            f"{canonical}ffn.fc2.{p}": f"{prefix}ffn.dense_out.{p}",
            f"{canonical}norm2.{p}": f"{prefix}ffn_norm.{p}",
        }
    return names


def encoder_params(config) -> dict:
    names = {}
    for i in range(config.n_layers):
        names |= layer_params(f"layers.{i}.", f"layers.{i}.")
    return names


def mha_forward(m, query, key, value, key_padding=None, attn_mask=None, causal=None):
    keep = build_keep(query.size(1), key.size(1), key_padding, attn_mask, causal, query.device)
    return m(query, key, value, keep)


def stack_forward(m, x, key_padding=None, attn_mask=None, causal=None):
    keep = build_keep(x.size(1), x.size(1), key_padding, attn_mask, causal, x.device)
    return m(x, keep)


BERT = Conventions(norm_placement="post", activation="gelu", eps=1e-12)

adapter = TorchModuleAdapter("chunked-encoder", [
    TorchEntry(
        "sinusoidal_pe",
        make=lambda config: SinusoidalPositions(config.d_model, config.max_len),
        forward=lambda m, positions: m(positions),
        supports=ConfigSpace(max_len=512),
    ),
    TorchEntry(
        "embedding",
        make=lambda config: Embeddings(config.vocab_size, config.d_model, config.padding_idx),
        forward=lambda m, ids: m.word_embeddings(ids),
        param_map={"weight": "word_embeddings.weight"},
    ),
    TorchEntry(
        "mha",
        make=lambda config: MemoryEfficientSelfAttention(config.d_model, config.n_heads),
        forward=mha_forward,
        param_map=attention_params("", ""),
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: EncoderLayer(config.d_model, config.n_heads, config.d_ff),
        forward=stack_forward,
        param_map=layer_params("", ""),
        conventions=BERT,
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "encoder",
        make=lambda config: Encoder(config.d_model, config.n_heads, config.d_ff, config.n_layers),
        forward=stack_forward,
        param_map=encoder_params,
        conventions=BERT,
        supports=ConfigSpace(split_heads=True),
    ),
])
