"""A ring cache whose step mask numbers queries and keys by their place in the attended list
(query i of the call against key j of the ring's live slots then the new keys) instead of by
token: aligned top-left, a decoded token sees the oldest keys the ring holds and misses the
newest ones, its own included (SPEC.md §11.6, §4.3). Right in the full forward, where the two
numberings agree."""

from __future__ import annotations

import torch
from torch import Tensor

from .ring_cache import RingAttention, ring_entry
from .tutorial import mutant

BUG_CLASS = "ring_cache_top_left"
EXPECTED_CODES = frozenset({"cache.causal_top_left"})


class Attention(RingAttention):
    def hidden(self, query_token: Tensor, key_token: Tensor) -> Tensor:
        # BUG: places in the call and in the attended list, not tokens
        q = torch.arange(len(query_token))[:, None]
        k = torch.arange(len(key_token))[None, :]
        return (k > q) | (k <= q - self.window)


adapter = mutant(BUG_CLASS, ring_entry(Attention))
