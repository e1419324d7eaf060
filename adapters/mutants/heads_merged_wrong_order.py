"""Heads merged in the wrong order: (B, H, Lq, d_k) is reshaped straight to (B, Lq, H*d_k)
without the transpose, which interleaves positions and heads before the output projection."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "heads_merged_wrong_order"
EXPECTED_CODES = frozenset({"attention.heads_merged_wrong_order"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, lk, h, d_k = q.size(0), q.size(1), k.size(1), self.n_heads, self.d_k
        q = self.w_q(q).view(b, lq, h, d_k).transpose(1, 2)
        k = self.w_k(k).view(b, lk, h, d_k).transpose(1, 2)
        v = self.w_v(v).view(b, lk, h, d_k).transpose(1, 2)
        if mask is not None:
            mask = mask.unsqueeze(1)
        x = self.attention(q, k, v, mask, causal)  # (B, H, Lq, d_k)
        x = x.contiguous().view(b, lq, h * d_k)  # BUG: no transpose(1, 2) first
        return self.fc(x)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
