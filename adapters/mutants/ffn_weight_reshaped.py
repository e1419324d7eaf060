"""A feed-forward network whose output projection multiplies by its weight reshaped where it
should be transposed: ``x @ w_2.weight.reshape(d_ff, d_model)`` for ``x @ w_2.weight.T``, the
slip of a port between a framework that stores kernels (in, out), as Flax and Keras do, and
one that stores them (out, in), as torch does. The shapes agree, so nothing raises; every
output channel mixes unrelated weights (SPEC.md §6.1). Resembles Blaizzy/mlx-vlm#1545 (kernels
moved between two frameworks' layouts with the wrong axis permutation)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import ffn_entry, mutant

BUG_CLASS = "ffn_weight_reshaped"
EXPECTED_CODES = frozenset({"params.weight_reshaped"})


class PositionwiseFeedForward(tutorial.PositionwiseFeedForward):
    def forward(self, x: Tensor) -> Tensor:
        hidden = self.dropout(self.activation(self.w_1(x)))
        weight = self.w_2.weight  # (d_model, d_ff)
        kernel = weight.reshape(weight.shape[1], weight.shape[0])  # BUG: weight.T
        return hidden @ kernel + self.w_2.bias


adapter = mutant(BUG_CLASS, ffn_entry(PositionwiseFeedForward))
