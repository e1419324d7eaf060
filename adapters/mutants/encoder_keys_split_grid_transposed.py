"""An encoder layer whose keys are split into heads after a permute that exchanges the head
and feature axes: each position's (H, d) key channels are read as (d, H) before the reshape
into heads (Sockeye's ``k.permute(1, 3, 2, 0)`` for ``permute(1, 2, 3, 0)`` on a
(len, batch, heads, head_dim) view: the same shape, a valid reshape after it), so every head
scores its queries against pieces of every head's key features (SPEC.md §3.3)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_keys_split_grid_transposed"
EXPECTED_CODES = frozenset({"attention.heads_split_wrong_order"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def project(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = super().project(q, k, v)
        b, length = k.shape[:2]
        # BUG: the (heads, head_dim) grid transposed before the split; no transpose belongs here
        k = k.view(b, length, self.n_heads, self.d_k).transpose(-1, -2).reshape(b, length, -1)
        return q, k, v


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
