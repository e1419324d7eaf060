"""The KV cache grows along the wrong axis: new keys and values concatenated along the head
axis (dim 1 of (B, H, T, d)) instead of the sequence axis (dim 2)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_wrong_axis"
EXPECTED_CODES = frozenset({"cache.wrong_axis"})


class Attention(gpt_tutorial.Attention):
    def extend_cache(self, cache, k: Tensor, v: Tensor):
        if cache is None:
            return k, v
        return torch.cat([cache[0], k], dim=1), torch.cat([cache[1], v], dim=1)  # BUG: dim 1


adapter = mutant(BUG_CLASS, attention_entry(Attention))
