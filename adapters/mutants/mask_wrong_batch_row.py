"""Key padding from the wrong batch row: heads are folded into the batch as b * H + h, but the
per-sample mask is expanded with ``mask.repeat(H, 1, 1)`` (index h * B + b) where
``repeat_interleave(H, 0)`` is meant, so heads read another sample's padding
(ArrowLuo/CLIP4Clip#22, line/lighthouse#77, reczoo/FuxiCTR#130)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "mask_wrong_batch_row"
EXPECTED_CODES = frozenset({"batch.rows_interact"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, lk, h, d_k = q.size(0), q.size(1), k.size(1), self.n_heads, self.d_k
        q = self.w_q(q).view(b, lq, h, d_k).transpose(1, 2).reshape(b * h, lq, d_k)
        k = self.w_k(k).view(b, lk, h, d_k).transpose(1, 2).reshape(b * h, lk, d_k)
        v = self.w_v(v).view(b, lk, h, d_k).transpose(1, 2).reshape(b * h, lk, d_k)
        if mask is not None:
            mask = mask.expand(b, lq, lk).repeat(h, 1, 1)  # BUG: not repeat_interleave(h, 0)
        x = self.attention(q, k, v, mask, causal)  # (B*H, Lq, d_k)
        x = x.view(b, h, lq, d_k).transpose(1, 2).contiguous().view(b, lq, h * d_k)
        return self.fc(x)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
