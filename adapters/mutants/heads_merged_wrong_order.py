"""Heads merged in the wrong order: (B, H, Lq, d_k) is reshaped straight to (B, Lq, H*d_k)
without the transpose, which interleaves positions and heads before the output projection."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "heads_merged_wrong_order"
EXPECTED_CODES = frozenset({"attention.heads_merged_wrong_order"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def merge_heads(self, x: Tensor) -> Tensor:  # x: (B, H, Lq, d_k)
        b, _, lq, _ = x.shape
        # BUG: no transpose(1, 2) first
        return x.contiguous().view(b, lq, self.n_heads * self.d_k)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
