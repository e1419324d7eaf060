"""A cached call's causal mask assembled with its two blocks in the wrong order:
``torch.cat([triu(n, n), zeros(n, past)])`` where Meta's llama ``model.py`` writes
``torch.hstack([zeros(seqlen, start_pos), mask])``. The triangle falls on the first n keys
and the open block on the last ``past``, the call's own later tokens among them. One token
per call sees every key either way and a prefill has no past: only a chunk of several tokens
on a non-empty cache goes wrong."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_chunk_mask_blocks_swapped"
EXPECTED_CODES = frozenset({"cache.causal_top_left"})


class Attention(gpt_tutorial.Attention):
    def future_mask(self, n: int, t: int, cached: bool) -> Tensor:
        triangle = torch.ones(n, n, dtype=torch.bool).triu(diagonal=1)
        past = torch.zeros(n, t - n, dtype=torch.bool)
        return torch.cat([triangle, past], dim=-1)  # BUG: [past, triangle]


adapter = mutant(BUG_CLASS, attention_entry(Attention))
