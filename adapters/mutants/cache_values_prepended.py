"""The KV cache extended at the wrong end for the values only: ``torch.cat([v, cache_v])``
beside ``torch.cat([cache_k, k])``, so the weight of each cached key multiplies another
token's value. With a prefill and one later call the step's own row still lines up; from
the second cached step on the values are misaligned (SPEC.md §11.6)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_values_prepended"
EXPECTED_CODES = frozenset({"cache.keys_prepended"})


class Attention(gpt_tutorial.Attention):
    def extend_cache(self, cache, k: Tensor, v: Tensor):  # type: ignore[no-untyped-def]
        if cache is None:
            return k, v
        return torch.cat([cache[0], k], dim=2), torch.cat([v, cache[1]], dim=2)  # BUG: values


adapter = mutant(BUG_CLASS, attention_entry(Attention))
