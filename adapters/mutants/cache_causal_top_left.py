"""The causal mask of a cached decoding step built for the new tokens alone: the cached
branch uses ``triu(diagonal=1)`` over (n, T), which is right only without a cache, so query i
of the step sees keys 0..i instead of keys up to T - n + i (aligned top-left, not
bottom-right), and a decoded token attends the first tokens of the sequence instead of its
own past (the full forward, a separate branch, is right)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_causal_top_left"
EXPECTED_CODES = frozenset({"cache.causal_top_left"})


class Attention(gpt_tutorial.Attention):
    def future_mask(self, n: int, t: int, cached: bool) -> Tensor:
        if cached:  # BUG: the diagonal ignores the t - n cached keys
            return torch.ones(n, t, dtype=torch.bool).triu(diagonal=1)
        return super().future_mask(n, t, cached)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
