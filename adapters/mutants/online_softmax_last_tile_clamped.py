"""Attention by the memory-efficient algorithm of Rabe & Staats (2021) over key chunks of 4
whose chunk start is clamped as JAX's ``lax.dynamic_slice`` clamps it: a last partial chunk
is moved back to end at the last key, ``min(start, Lk - 4)``, so the keys it shares with the
chunk before are summarised twice and weigh double. Key lengths that are multiples of 4 hide
it (SPEC.md §3.1). The clamping is documented in JAX's ``lax.dynamic_slice``; the algorithm's
reference code assumes lengths divisible by the chunk size."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, encoder_layer_entry, mha_entry, mutant

BUG_CLASS = "online_softmax_last_tile_clamped"
EXPECTED_CODES = frozenset({"attention.online_softmax_wrong"})
KEY_CHUNK = 4


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        scores = q @ k.transpose(-2, -1) / self.temperature  # (B, H, Lq, Lk)
        lq, lk = scores.shape[-2:]
        keep = torch.ones_like(scores, dtype=torch.bool)
        if causal:
            keep = keep & torch.ones(lq, lk, dtype=torch.bool, device=scores.device).tril()
        if mask is not None:
            keep = keep & (mask != 0)
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
        size = min(KEY_CHUNK, lk)
        values, sums, maxima = [], [], []
        for start in range(0, lk, size):
            start = min(start, lk - size)  # BUG: a clamped slice start repeats keys
            chunk = scores[..., start : start + size]
            chunk_max = chunk.amax(dim=-1, keepdim=True).detach()
            weights = torch.exp(chunk - chunk_max) * keep[..., start : start + size]
            values.append(weights @ v[..., start : start + size, :])
            sums.append(weights.sum(dim=-1, keepdim=True))
            maxima.append(chunk_max)
        chunk_max = torch.stack(maxima)
        factors = torch.exp(chunk_max - chunk_max.amax(dim=0, keepdim=True))
        all_sums = (torch.stack(sums) * factors).sum(dim=0)
        out = (torch.stack(values) * factors).sum(dim=0) / all_sums.clamp_min(1e-30)
        return out  # a query with no key: zeros (every weight is 0)


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(
    BUG_CLASS,
    attention_entry(ScaledDotProductAttention),
    mha_entry(MultiHeadAttention),
    encoder_layer_entry(EncoderLayer),
)
