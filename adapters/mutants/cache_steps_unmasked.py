"""The causal mask skipped once the cache is non-empty: the mask is built for the prefill and
left out of every later call, as if each step brought one token (which needs none). One
token per step decodes correctly; a chunked prefill or a speculative-decoding verification
step lets each token of the chunk see the later tokens of its chunk (SPEC.md §4.3, §11.9).
Resembles facebookresearch/xformers#103 (a causal mask that assumes one query per step)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_steps_unmasked"
EXPECTED_CODES = frozenset({"mask.causal_leak"})


class Attention(gpt_tutorial.Attention):
    def future_mask(self, n: int, t: int, cached: bool) -> Tensor:
        if cached:  # BUG: a cached call of n > 1 tokens needs the mask too
            return torch.zeros(n, t, dtype=torch.bool)
        return super().future_mask(n, t, cached)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
