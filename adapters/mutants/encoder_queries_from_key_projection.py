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
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, lk, h, d_k = q.size(0), q.size(1), k.size(1), self.n_heads, self.d_k
        q = self.w_k(q).view(b, lq, h, d_k).transpose(1, 2)  # BUG: self.w_q(q)
        k = self.w_k(k).view(b, lk, h, d_k).transpose(1, 2)
        v = self.w_v(v).view(b, lk, h, d_k).transpose(1, 2)
        if mask is not None:
            mask = mask.unsqueeze(1)
        x = self.attention(q, k, v, mask, causal)
        return self.fc(x.transpose(1, 2).contiguous().view(b, lq, h * d_k))


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
