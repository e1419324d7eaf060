"""Multi-head attention whose split view has the head count and head width exchanged:
``view(b, l, d_k, h).permute(0, 2, 1, 3)`` for ``view(b, l, h, d_k)`` (transformers'
``transpose_for_scores`` with its two sizes typed in the other order). The attention then
runs d_k heads of width h, each a block of h consecutive channels, still scaled by
1/sqrt(d_k); the merge reads them back consistently, so nothing raises (SPEC.md §3.3).
"""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mha_entry, mutant

BUG_CLASS = "mha_head_count_swapped"
EXPECTED_CODES = frozenset({"attention.head_count_wrong"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, lk, h, d_k = q.size(0), q.size(1), k.size(1), self.n_heads, self.d_k
        q = self.w_q(q).view(b, lq, d_k, h).transpose(1, 2)  # BUG: (d_k, h) for (h, d_k)
        k = self.w_k(k).view(b, lk, d_k, h).transpose(1, 2)  # BUG
        v = self.w_v(v).view(b, lk, d_k, h).transpose(1, 2)  # BUG
        if mask is not None:
            mask = mask.unsqueeze(1)  # the same mask for every head
        x = self.attention(q, k, v, mask, causal)  # (B, d_k, Lq, h), scaled by sqrt(d_k)
        x = x.transpose(1, 2).contiguous().view(b, lq, h * d_k)
        return self.fc(x)


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention), encoder_layer_entry(EncoderLayer))
