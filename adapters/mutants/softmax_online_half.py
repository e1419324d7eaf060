"""Causal self-attention whose online softmax (FlashAttention's running maximum, running sum
and output accumulator, over key tiles of 16) is kept in the input dtype: in float16 or
bfloat16 every tile's contribution is added to a 16-bit running sum and accumulator, so the
rounding error grows with the number of keys a query sees (bfloat16 has 8 bits: a running sum
past 256 no longer takes small additions exactly). The careful implementation keeps the three
in float32 (FlashAttention's ``m_i``, ``l_i`` and ``acc`` are float32 registers whatever the
input dtype; Dao et al. 2022, Algorithm 1). Short rows hide it (one or two tiles): only long
rows show it (SPEC.md §10.10)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "softmax_online_half"
EXPECTED_CODES = frozenset({"numerics.softmax_low_precision"})
KEY_TILE = 16


def online_attention(q: Tensor, k: Tensor, v: Tensor, hidden: Tensor, scale: float) -> Tensor:
    """softmax(q k^T * scale, keys where ``hidden`` is False) v, one key tile at a time."""
    work = q.dtype  # BUG: the running statistics in the input dtype, not float32
    m = torch.full((*q.shape[:-1], 1), -math.inf, dtype=work)
    total = torch.zeros((*q.shape[:-1], 1), dtype=work)
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=work)
    for start in range(0, k.shape[-2], KEY_TILE):
        stop = start + KEY_TILE
        s = (q @ k[..., start:stop, :].transpose(-2, -1)) * scale
        s = s.masked_fill(hidden[..., start:stop], -math.inf)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        m_safe = m_new.masked_fill(m_new == -math.inf, 0.0)
        p = torch.exp(s - m_safe)
        alpha = torch.exp(m - m_safe)
        total = total * alpha + p.sum(dim=-1, keepdim=True)
        acc = acc * alpha + p @ v[..., start:stop, :]
        m = m_new
    return acc / torch.where(total > 0, total, torch.ones_like(total))


class Attention(gpt_tutorial.Attention):
    """gpt_tutorial's attention with its softmax computed by ``kernel``."""

    kernel = staticmethod(online_attention)

    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        pad_mask: Tensor | None = None,
        cache: Cache | None = None,
    ) -> tuple[Tensor, Cache]:
        b, n, _ = x.shape
        past = 0 if cache is None else cache[0].shape[2]
        if positions is None:
            positions = self.default_positions(b, n, past)
        q = self.wq(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.rope:
            q, k = self.rotate(q, positions), self.rotate(k, positions)
        cache = self.extend_cache(cache, k, v)
        k, v = self.repeat_kv(cache[0]), self.repeat_kv(cache[1])
        hidden = self.future_mask(n, k.shape[2], past > 0)[None, None]  # (1, 1, n, T)
        if pad_mask is not None:
            hidden = hidden | self.padding_mask(pad_mask, n)
        y = self.kernel(q, k, v, hidden, self.scale())
        return self.wo(y.transpose(1, 2).reshape(b, n, -1)), cache


adapter = mutant(BUG_CLASS, attention_entry(Attention))
