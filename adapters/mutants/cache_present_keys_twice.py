"""Causal self-attention that attends with the right keys and values but returns the cache
``present = (key, key)``: each call's own output is right, and every later call weighs the
cached tokens' rotated keys where their values belong (GPT-J's legacy tuple cache with the
value slot copy-pasted from the key's). The plain forward reads no cache and is right
(SPEC.md §11.6, §3.1)."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_present_keys_twice"
EXPECTED_CODES = frozenset({"attention.value_uses_key_projection"})


class Attention(gpt_tutorial.Attention):
    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        pad_mask: Tensor | None = None,
        cache: Cache | None = None,
    ) -> tuple[Tensor, Cache]:
        y, (keys, _) = super().forward(x, positions, pad_mask, cache)
        return y, (keys, keys)  # BUG: present = (key, value)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
