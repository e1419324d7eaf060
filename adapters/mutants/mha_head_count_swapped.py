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
    def split_heads(self, x: Tensor) -> Tensor:
        b, length = x.shape[:2]
        return x.view(b, length, self.d_k, self.n_heads).transpose(1, 2)  # BUG: (d_k, h)


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention), encoder_layer_entry(EncoderLayer))
