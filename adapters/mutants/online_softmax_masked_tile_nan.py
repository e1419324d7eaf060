"""Attention by the memory-efficient algorithm of Rabe & Staats (2021) over key chunks of 4
with masked scores filled with -inf and no guard: a chunk whose keys are all masked for a
query has a maximum of -inf, ``exp(-inf - (-inf))`` is NaN, and the query's row turns NaN
although it sees keys in other chunks (a causal query's future chunks, a padded sequence's
last chunk). Unmasked calls are exact (SPEC.md §3.1, §4.1). Public reports of the class:
flashinfer-ai/flashinfer#1178 (an online softmax NaN when a thread's slice is all -inf) and
#4401 (an empty split-KV chunk merged into NaN)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, encoder_layer_entry, mha_entry, mutant

BUG_CLASS = "online_softmax_masked_tile_nan"
EXPECTED_CODES = frozenset({"attention.online_softmax_wrong"})
KEY_CHUNK = 4


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        scores = q @ k.transpose(-2, -1) / self.temperature  # (B, H, Lq, Lk)
        lq, lk = scores.shape[-2:]
        if causal:
            future = torch.ones(lq, lk, dtype=torch.bool, device=scores.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))  # BUG: no finite fill
        values, sums, maxima = [], [], []
        for start in range(0, lk, KEY_CHUNK):
            chunk = scores[..., start : start + KEY_CHUNK]
            chunk_max = chunk.amax(dim=-1, keepdim=True).detach()
            weights = torch.exp(chunk - chunk_max)
            values.append(weights @ v[..., start : start + KEY_CHUNK, :])
            sums.append(weights.sum(dim=-1, keepdim=True))
            maxima.append(chunk_max)
        chunk_max = torch.stack(maxima)
        factors = torch.exp(chunk_max - chunk_max.amax(dim=0, keepdim=True))
        out = (torch.stack(values) * factors).sum(dim=0) / (torch.stack(sums) * factors).sum(dim=0)
        no_key = torch.isinf(scores).all(dim=-1, keepdim=True)
        return out.masked_fill(no_key, 0.0)  # a query with no key at all: zeros


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
