"""The causal mask of a cached decoding step off by one position: the cached branch masks
keys from index T - n instead of T - n + 1, so each new token attends the cached keys but not
its own (the full forward, a separate branch, is right)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_causal_off_by_one"
EXPECTED_CODES = frozenset({"cache.causal_off_by_one"})


class Attention(gpt_tutorial.Attention):
    def future_mask(self, n: int, t: int, cached: bool) -> Tensor:
        if cached:  # BUG: diagonal t - n hides the new token's own key
            return torch.ones(n, t, dtype=torch.bool).triu(diagonal=t - n)
        return super().future_mask(n, t, cached)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
