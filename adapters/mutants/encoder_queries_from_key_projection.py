"""An encoder layer whose queries are computed with the key projection (``self.w_k(q)``
where ``self.w_q(q)`` belongs, a copy-paste of the line below it): the query projection is
held and loaded but never used. The projections are modules of their own, so this is one
module read with another's parameters, not a fused qkv split in the wrong order
(SPEC.md §0.2, §3.4)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_queries_from_key_projection"
EXPECTED_CODES = frozenset({"params.read_from_other_module"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def project(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.w_k(q), self.w_k(k), self.w_v(v)  # BUG: self.w_q(q)


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
