"""Heads merged feature-major inside an encoder layer offered alone (no attention subject):
the (B, H, L, d) context is transposed to (B, L, d, H) before the reshape to (B, L, H*d), so
feature j of head h lands at channel j*H + h instead of h*d + j (the same mistake as a
varlen kernel's (total, H, d) output transposed to (total, d, H) before it is flattened).
Nothing crosses positions, so the layer's padding and causal properties all hold; only the
oracle comparison of the layer sees it (SPEC.md §3.3)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "heads_merged_feature_major"
EXPECTED_CODES = frozenset({"attention.heads_merged_wrong_order"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def merge_heads(self, x: Tensor) -> Tensor:  # x: (B, H, Lq, d_k)
        b, _, lq, _ = x.shape
        # BUG: (B, L, d, H), not (B, L, H, d)
        return x.permute(0, 2, 3, 1).reshape(b, lq, self.n_heads * self.d_k)


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
