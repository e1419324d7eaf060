"""A chunk's causal mask built square, for the call's tokens alone: ``triu(ones(n, n), 1)``
where the scores of a call of n tokens on a cache of T keys are (n, T). One token per step
needs no mask and decodes correctly, and the prefill (nothing cached, T = n) is right; a
chunk of several tokens on a non-empty cache fails with a broadcast error (Meta's llama
``model.py`` builds the chunk's mask ``(seqlen, seqlen)`` and widens it with
``torch.hstack([zeros(seqlen, start_pos), mask])``; without that line a chunked call raises).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_chunk_mask_square"
EXPECTED_CODES = frozenset({"cache.causal_top_left"})


class Attention(gpt_tutorial.Attention):
    def future_mask(self, n: int, t: int, cached: bool) -> Tensor:
        if n == 1:  # one new token may see every key
            return torch.zeros(1, t, dtype=torch.bool)
        return torch.ones(n, n, dtype=torch.bool).triu(diagonal=1)  # BUG: (n, T) on a cache


adapter = mutant(BUG_CLASS, attention_entry(Attention))
