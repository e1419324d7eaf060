"""Causal self-attention that combines its two removal masks (True = hidden: the future
triangle and the key padding) with AND where OR belongs, as Megatron-style code does when it
merges a padding mask into its causal ``attention_mask`` (``attention_mask & ~keep`` for
``attention_mask | ~keep``): a key is hidden only when it is both in the future and padding.
A call without padding keeps the causal mask alone and is right; with padding, every real
key after a query is attended. Hiding with AND is keeping with OR (SPEC.md §4.1)."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "causal_masks_combined_with_and"
EXPECTED_CODES = frozenset({"mask.combined_with_or"})


class Attention(gpt_tutorial.Attention):
    def hidden(self, n: int, t: int, cached: bool, pad_mask: Tensor | None) -> Tensor:
        future = self.future_mask(n, t, cached)
        if pad_mask is None:
            return future
        return future & self.padding_mask(pad_mask, n)  # BUG: | (hide where either hides)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
