"""An encoder layer whose attention computes its four projections with one hand-written
linear class that never adds its bias (a JAX port's ``LinearGeneral``: ``tensordot(x,
kernel) + bias`` written without the ``+ bias``), while the feed-forward network's
``nn.Linear`` layers keep theirs: q, k, v and o are loaded with biases the module never uses
(SPEC.md §0.2, §3.4)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "attention_projections_without_bias"
EXPECTED_CODES = frozenset({"params.bias_unused"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, lk, h, d_k = q.size(0), q.size(1), k.size(1), self.n_heads, self.d_k
        q = F.linear(q, self.w_q.weight).view(b, lq, h, d_k).transpose(1, 2)  # BUG: no bias
        k = F.linear(k, self.w_k.weight).view(b, lk, h, d_k).transpose(1, 2)
        v = F.linear(v, self.w_v.weight).view(b, lk, h, d_k).transpose(1, 2)
        if mask is not None:
            mask = mask.unsqueeze(1)
        x = self.attention(q, k, v, mask, causal).transpose(1, 2).reshape(b, lq, h * d_k)
        return F.linear(x, self.fc.weight)


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer, norm_first=True))
