"""Causal self-attention whose KV cache writes the keys into its value buffer (llama2.c's
``value_cache_row`` pointed at the key cache, a copy-paste of the key line): every call
attends with the rotated keys as its values, so the values' projection is never used
(SPEC.md §3.4, §11.6). A call of one token hides it only as far as the keys go: the output
is then the key's projection."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "value_cache_holds_keys"
EXPECTED_CODES = frozenset({"attention.value_uses_key_projection"})


class Attention(gpt_tutorial.Attention):
    def extend_cache(self, cache: Cache | None, k: Tensor, v: Tensor) -> Cache:
        if cache is None:
            return k, k  # BUG: the value buffer written with the keys
        return gpt_tutorial.Attention.extend_cache(self, cache, k, k)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
