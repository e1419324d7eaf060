"""An encoder layer whose attention merges its heads with a view whose shape is read off the
context, ``context.size()[:-2] + (hidden,)``, and the permute before it left out (NeMo's
``MultiHeadAttention`` without its ``context.permute(0, 2, 1, 3)``): on a (B, H, L, d)
context the shape is (B, H, hidden), which holds another number of elements unless the
sequence is as long as the head count, so nearly every call raises and the one that runs
merges each head's tokens into one row (SPEC.md §3.3)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_heads_merged_shape_from_context"
EXPECTED_CODES = frozenset({"attention.heads_merged_wrong_order"})
# every call whose length is not the head count raises in the view
RAISES = True


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def merge_heads(self, x: Tensor) -> Tensor:  # x: (B, H, L, d_k)
        # BUG: x.transpose(1, 2) missing before the shape is read off the context
        return x.contiguous().view((*x.size()[:-2], self.n_heads * self.d_k))


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
