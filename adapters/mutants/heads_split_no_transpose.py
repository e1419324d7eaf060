"""Heads split by a plain view: ``q.view(B * H, -1, d_k)`` (the same as ``view(B, H, L, d_k)``)
instead of ``view(B, L, H, d_k).transpose(1, 2)``, so each "head" holds a block of several
positions' channels. The merge after attention undoes the same view, so shapes all fit.
Cited: reczoo/FuxiCTR#30 ("The code of splitting heads is buggy, without transpose the
shape": ``query.view(batch_size * self.num_heads, -1, self.attention_dim)``, copied from a
blog post; it affected AutoInt, DESTINE and InterHAt), 649453932/Chinese-Text-Classification-
Pytorch#53 (the same ``Q.view(batch_size * self.num_head, -1, self.dim_head)``),
hyunwoongko/transformer#15 (why ``view(B, H, L, d)`` without the transpose is not the same).
"""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "heads_split_no_transpose"
EXPECTED_CODES = frozenset({"attention.heads_split_wrong_order"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def split_heads(self, x: Tensor) -> Tensor:
        b, length = x.shape[:2]
        return x.view(b, self.n_heads, length, self.d_k)  # BUG: view(b, L, h, d_k).transpose(1, 2)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
