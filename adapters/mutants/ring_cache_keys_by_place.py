"""A ring cache whose step mask numbers the keys by their place in the attended list (the
ring's live slots, then the new keys) while the queries keep their token numbers: right
until the ring drops its first token, then every decoded token loses one more of its
window's oldest keys at each step, its own key last, and a query left with no key is 0
(SPEC.md §11.6, §4.5). Resembles mistral-src's rolling buffer with the key indices taken
as ``arange(len(keys))``; right in the full forward, where the two numberings agree."""

from __future__ import annotations

import torch
from torch import Tensor

from .ring_cache import RingAttention, ring_entry
from .tutorial import mutant

BUG_CLASS = "ring_cache_keys_by_place"
EXPECTED_CODES = frozenset({"cache.causal_offset_wrong"})


class Attention(RingAttention):
    def hidden(self, query_token: Tensor, key_token: Tensor) -> Tensor:
        q = query_token[:, None]
        k = torch.arange(len(key_token))[None, :]  # BUG: the key's place, not its token
        return (k > q) | (k <= q - self.window)


adapter = mutant(BUG_CLASS, ring_entry(Attention))
