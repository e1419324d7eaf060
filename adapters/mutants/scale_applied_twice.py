"""Attention scaled twice: the query is multiplied by ``head_dim ** -0.5`` and the scores are
divided by ``sqrt(head_dim)`` again (an SDPA call left with its default scale), so the
effective scale is 1/d_k. Cited: huggingface/transformers#38290 ("[OPT] Fix attention
scaling": "Scaling has been applied twice to OPT", fixes #38277).
"""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "scale_applied_twice"
EXPECTED_CODES = frozenset({"attention.scale_wrong"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, lk, h, d_k = q.size(0), q.size(1), k.size(1), self.n_heads, self.d_k
        q = (self.w_q(q) * d_k**-0.5).view(b, lq, h, d_k).transpose(1, 2)  # BUG: scaled here
        k = self.w_k(k).view(b, lk, h, d_k).transpose(1, 2)
        v = self.w_v(v).view(b, lk, h, d_k).transpose(1, 2)
        if mask is not None:
            mask = mask.unsqueeze(1)
        x = self.attention(q, k, v, mask, causal)  # ... and by 1/temperature again
        return self.fc(x.transpose(1, 2).contiguous().view(b, lq, h * d_k))


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
