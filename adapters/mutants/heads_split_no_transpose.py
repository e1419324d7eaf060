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
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, lk, h, d_k = q.size(0), q.size(1), k.size(1), self.n_heads, self.d_k
        q = self.w_q(q).view(b, h, lq, d_k)  # BUG: view(b, lq, h, d_k).transpose(1, 2)
        k = self.w_k(k).view(b, h, lk, d_k)  # BUG
        v = self.w_v(v).view(b, h, lk, d_k)  # BUG
        if mask is not None:
            mask = mask.unsqueeze(1)
        x = self.attention(q, k, v, mask, causal)  # (B, H, Lq, d_k)
        x = x.transpose(1, 2).contiguous().view(b, lq, h * d_k)
        return self.fc(x)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
