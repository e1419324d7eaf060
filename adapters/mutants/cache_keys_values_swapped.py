"""A cache whose (key, value) pair is unpacked in the other order when read back: ``past_value,
past_key = layer_past`` where transformers' GPT-2 writes ``past_key, past_value =
layer_past``, the new key and value then concatenated to the wrong ones and the result
stored as the next call's cache (``present = (key, value)``). The prefill has no cache and
is right; every cached step scores the cached tokens with their values and weights their
keys, the swap undone and redone at every other call (SPEC.md §11.6). Code moved between
libraries whose caches order the pair differently makes this mistake (transformers'
legacy ``(key, value)`` tuples beside caches that return ``(value, key)`` or a dict), and
the plain forward never shows it."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_keys_values_swapped"
EXPECTED_CODES = frozenset({"cache.keys_values_swapped"})


class Attention(gpt_tutorial.Attention):
    def extend_cache(self, cache: Cache | None, k: Tensor, v: Tensor) -> Cache:
        if cache is None:
            return k, v
        past_v, past_k = cache  # BUG: the pair is (key, value)
        return torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
