"""A KV cache whose first write stores the values right and whose later updates append the
new tokens' keys to the value cache (``torch.cat([values, key_states])`` in the branch of a
cache's ``update`` that extends an existing layer, the branch that creates it right): the
prefill is right, and every token decoded after it contributes its rotated key as its value
(SPEC.md §11.6, §3.1). The plain forward reads no cache and is right."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "value_cache_keys_after_prefill"
EXPECTED_CODES = frozenset({"attention.value_uses_key_projection"})


class Attention(gpt_tutorial.Attention):
    def extend_cache(self, cache: Cache | None, k: Tensor, v: Tensor) -> Cache:
        if cache is None:
            return k, v
        return torch.cat([cache[0], k], dim=2), torch.cat([cache[1], k], dim=2)  # BUG: v


adapter = mutant(BUG_CLASS, attention_entry(Attention))
