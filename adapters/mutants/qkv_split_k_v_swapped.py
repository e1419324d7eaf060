"""Causal self-attention whose key and value projections trade places: the fused-qkv port's
``q, v, k = qkv.split(...)`` (the split read in another order than the weight was stored
in), here with the separate projections ``wk`` and ``wv`` called for each other. Keys and
values of one shape (grouped-query heads narrow both alike), so nothing fails to run: the
scores compare queries with the value vectors and mix the key vectors.
"""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "qkv_split_k_v_swapped"
EXPECTED_CODES = frozenset({"attention.qkv_order_wrong"})


class Attention(gpt_tutorial.Attention):
    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        pad_mask: Tensor | None = None,
        cache: Cache | None = None,
    ) -> tuple[Tensor, Cache]:
        wk, wv = self.wk, self.wv
        self.wk, self.wv = wv, wk  # BUG: k taken from the value slice, v from the key slice
        try:
            return super().forward(x, positions, pad_mask, cache)
        finally:
            self.wk, self.wv = wk, wv


adapter = mutant(BUG_CLASS, attention_entry(Attention))
