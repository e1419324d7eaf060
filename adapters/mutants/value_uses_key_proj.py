"""Value projection uses the key weights: ``v = self.w_k(v)``, a copy-paste slip that leaves
``w_v`` unused (seed 004)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "value_uses_key_proj"
EXPECTED_CODES = frozenset({"attention.value_uses_key_projection"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, lk, h, d_k = q.size(0), q.size(1), k.size(1), self.n_heads, self.d_k
        q = self.w_q(q).view(b, lq, h, d_k).transpose(1, 2)
        k = self.w_k(k).view(b, lk, h, d_k).transpose(1, 2)
        v = self.w_k(v).view(b, lk, h, d_k).transpose(1, 2)  # BUG: w_k, not w_v
        if mask is not None:
            mask = mask.unsqueeze(1)
        x = self.attention(q, k, v, mask, causal)
        x = x.transpose(1, 2).contiguous().view(b, lq, h * d_k)
        return self.fc(x)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
