"""A ring cache with Mistral's fill (hidden scores set to ``torch.finfo(dtype).min``) whose
step mask numbers queries and keys by their place in the call and in the attended list:
aligned top-left, a decoded token sees the oldest keys the ring holds, and once the ring is
full a query keeps no key at all, so its softmax weighs every key it read equally instead of
being NaN or 0 (SPEC.md §11.6, §4.3, §4.4)."""

from __future__ import annotations

import torch
from torch import Tensor

from .ring_cache import MinFillRingAttention, ring_entry
from .tutorial import mutant

BUG_CLASS = "ring_cache_min_fill_top_left"
EXPECTED_CODES = frozenset({"cache.causal_top_left"})


class Attention(MinFillRingAttention):
    def hidden(self, query_token: Tensor, key_token: Tensor) -> Tensor:
        # BUG: places in the call and in the attended list, not tokens
        q = torch.arange(len(query_token))[:, None]
        k = torch.arange(len(key_token))[None, :]
        return (k > q) | (k <= q - self.window)


adapter = mutant(BUG_CLASS, ring_entry(Attention))
