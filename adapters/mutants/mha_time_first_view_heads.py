"""Multi-head attention that projects time-first (fairseq's ``[L, B, D]`` layout, transposed
back to batch-first) and then cuts the heads with a view straight to ``(B, H, L, d)``, without
the transpose: the projected tensor is not contiguous, so the view raises on every call with
more than one row and more than one token; where it runs (one row) it splits the heads in the
wrong order. Only the exception shows it on the suite's batched calls.
"""

from __future__ import annotations

from torch import Tensor, nn

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "mha_time_first_view_heads"
EXPECTED_CODES = frozenset({"attention.heads_split_wrong_order"})
# The bug raises on the suite's batched calls by design (a view torch refuses), so its
# error rows are the bug's, not a broken mutant's (tests/detection/test_detection.py).
RAISES = True


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, lk, h, d_k = q.size(0), q.size(1), k.size(1), self.n_heads, self.d_k

        def heads(linear: nn.Linear, x: Tensor, length: int) -> Tensor:
            y = linear(x.transpose(0, 1)).transpose(0, 1)  # (B, L, D) from a time-first matmul
            return y.view(b, h, length, d_k)  # BUG: no transpose (and y is not contiguous)

        q, k, v = heads(self.w_q, q, lq), heads(self.w_k, k, lk), heads(self.w_v, v, lk)
        if mask is not None:
            mask = mask.unsqueeze(1)
        x = self.attention(q, k, v, mask, causal)
        x = x.transpose(1, 2).contiguous().view(b, lq, h * d_k)
        return self.fc(x)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
