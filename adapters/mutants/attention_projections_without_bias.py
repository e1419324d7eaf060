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
    def project(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        # BUG: no bias (F.linear(x, w.weight, w.bias))
        return (
            F.linear(q, self.w_q.weight),
            F.linear(k, self.w_k.weight),
            F.linear(v, self.w_v.weight),
        )

    def output(self, x: Tensor) -> Tensor:
        return F.linear(x, self.fc.weight)


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer, norm_first=True))
