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
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, lk, h, d_k = q.size(0), q.size(1), k.size(1), self.n_heads, self.d_k
        q = self.w_q(q).view(b, lq, h, d_k).transpose(1, 2)  # (B, H, Lq, d_k)
        k = self.w_k(k).view(b, lk, h, d_k).transpose(1, 2)
        v = self.w_v(v).view(b, lk, h, d_k).transpose(1, 2)
        if mask is not None:
            mask = mask.unsqueeze(1)
        x = self.attention(q, k, v, mask, causal)  # (B, H, Lq, d_k)
        x = x.transpose(2, 3).reshape(b, lq, h * d_k)  # BUG: transpose(1, 2)
        return self.fc(x)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
