"""An encoder layer whose attention leaves out its output projection: the merged heads go
to the residual add as they are (``return context`` for ``return self.fc(context)``, a
refactor that moved the projection out and forgot it), so the projection's weight and bias
are loaded and never applied (SPEC.md §3.4, §0.2)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_output_projection_skipped"
EXPECTED_CODES = frozenset({"params.unused"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, lk, h, d_k = q.size(0), q.size(1), k.size(1), self.n_heads, self.d_k
        q = self.w_q(q).view(b, lq, h, d_k).transpose(1, 2)
        k = self.w_k(k).view(b, lk, h, d_k).transpose(1, 2)
        v = self.w_v(v).view(b, lk, h, d_k).transpose(1, 2)
        if mask is not None:
            mask = mask.unsqueeze(1)
        x = self.attention(q, k, v, mask, causal)
        return x.transpose(1, 2).contiguous().view(b, lq, h * d_k)  # BUG: self.fc(...)


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
