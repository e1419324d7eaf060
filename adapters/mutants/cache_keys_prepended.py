"""The KV cache extended at the wrong end: a step's keys and values concatenated before the
cached ones, ``torch.cat([k, cache_k], dim=2)`` for ``torch.cat([cache_k, k], dim=2)``. One
query over all keys does not see the order, but the causal mask of a chunk and the padding
mask, both laid over the cache by index, then fall on the wrong keys."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_keys_prepended"
EXPECTED_CODES = frozenset({"cache.keys_prepended"})


class Attention(gpt_tutorial.Attention):
    def extend_cache(self, cache, k: Tensor, v: Tensor):
        if cache is None:
            return k, v
        return torch.cat([k, cache[0]], dim=2), torch.cat([v, cache[1]], dim=2)  # BUG: prepended


adapter = mutant(BUG_CLASS, attention_entry(Attention))
