"""A causal mask that is right for one-token steps and for a prefill on an empty cache, but
not for a chunk of several tokens on a non-empty cache: the mask is built only when the call
has more than one token, as ``triu(ones(n, T), 1)`` (query i sees keys 0..i), which is
right only when nothing is cached. One token per step needs no mask and decodes correctly;
a chunked prefill (or speculative decoding's verification step) attends the first tokens of
the sequence instead of the cache (Meta's llama ``model.py`` built the chunk's mask without
the cached columns until ``torch.hstack([zeros(seqlen, start_pos), mask])`` was added)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_chunk_top_left"
EXPECTED_CODES = frozenset({"cache.causal_top_left"})


class Attention(gpt_tutorial.Attention):
    def future_mask(self, n: int, t: int, cached: bool) -> Tensor:
        if n == 1:  # one new token may see every key
            return torch.zeros(1, t, dtype=torch.bool)
        return torch.ones(n, t, dtype=torch.bool).triu(diagonal=1)  # BUG: t - n cached keys


adapter = mutant(BUG_CLASS, attention_entry(Attention))
