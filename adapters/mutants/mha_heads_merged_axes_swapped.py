"""Multi-head attention whose context is merged by transposing the wrong pair of axes:
``x.transpose(2, 3).reshape(B, L, H*d)`` on ``(B, H, L, d)`` where ``x.transpose(1, 2)`` was
meant, as code written for one example, ``(H, L, d).transpose(1, 2)`` instead of
``transpose(0, 1)``, does once it is batched (a ``torch.func.vmap`` port). Positions, heads
and features are scrambled before the output projection (SPEC.md §3.3)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "mha_heads_merged_axes_swapped"
EXPECTED_CODES = frozenset({"attention.heads_merged_wrong_order"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def merge_heads(self, x: Tensor) -> Tensor:  # x: (B, H, Lq, d_k)
        b, _, lq, _ = x.shape
        # BUG: transpose(1, 2)
        return x.transpose(2, 3).reshape(b, lq, self.n_heads * self.d_k)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
