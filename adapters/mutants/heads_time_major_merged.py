"""Multi-head attention whose fused projection is split into heads without exchanging the
token and head axes (a ``(B, N, 3, H, d)`` tensor permuted ``(2, 0, 1, 3, 4)`` for
``(2, 0, 3, 1, 4)``, as a port of PaddleClas' or timm's fused qkv slips), while the output
is still merged as if the heads came first (``x.transpose(1, 2).reshape(B, N, C)``): each
position attends over its own heads, and a padding mask ``(B, 1, 1, Lk)`` no longer
broadcasts, so masked calls raise (SPEC.md §3.3)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "heads_time_major_merged"
EXPECTED_CODES = frozenset({"attention.heads_split_wrong_order"})
# its masked calls raise: a (B, 1, 1, Lk) mask does not broadcast over (B, L, H, H)
RAISES = True


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def split_heads(self, x: Tensor) -> Tensor:
        b, length = x.shape[:2]
        return x.view(b, length, self.n_heads, self.d_k)  # BUG: .transpose(1, 2) missing

    def merge_heads(self, x: Tensor) -> Tensor:  # x: (B, Lq, H, d_k), as split above
        b, lq = x.shape[:2]
        return x.transpose(1, 2).reshape(b, lq, self.n_heads * self.d_k)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
