"""A cached attention that reads the number of cached tokens off the head axis of its
``(B, H, T, hd)`` cache (``size(1)`` where ``size(-2)`` is meant, as code ported from a
``(B, T, H, hd)`` layout does) and slices its causal bias at that row: every cached step's
mask is offset by the head count whatever the cache holds, so once the cache is longer a
decoded token misses the latest cached keys and its own (SPEC.md §11.6, §4.3). The position
ids come from the caller and stay right. Resembles the cache offset read from the wrong
place in ml-explore/mlx-lm#93."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_causal_offset_from_heads"
EXPECTED_CODES = frozenset({"cache.causal_offset_wrong"})


class Attention(gpt_tutorial.Attention):
    past = 0

    def extend_cache(self, cache: Cache | None, k: Tensor, v: Tensor) -> Cache:
        self.past = 0 if cache is None else cache[0].size(1)  # BUG: the head axis, not size(-2)
        return super().extend_cache(cache, k, v)

    def future_mask(self, n: int, t: int, cached: bool) -> Tensor:
        bias = torch.ones(self.past + n, t, dtype=torch.bool).tril()  # rows past..past+n-1
        return ~bias[self.past : self.past + n]


adapter = mutant(BUG_CLASS, attention_entry(Attention))
