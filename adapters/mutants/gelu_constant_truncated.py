"""The tanh GELU with its factor sqrt(2/pi) written as the literal 0.79788456 (eight
significant digits, 1e-10 off), where the tanh GELU is declared: Megatron-LM's fused
bias-GELU kernel writes that literal, and a port that copies it changes a float64 output by
about 1e-9, within float32's precision and on no float32 number. The diagnosis solves the
factor and names it (``ffn.activation_wrong``), rather than calling it precision lost in
float32 (``numerics.float64_precision_lost``, which a constant held as a float32 number is).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import ffn_entry, mutant

BUG_CLASS = "gelu_constant_truncated"
EXPECTED_CODES = frozenset({"ffn.activation_wrong"})


def gelu_tanh(x: Tensor) -> Tensor:  # BUG: 0.79788456 for sqrt(2/pi) = 0.7978845608028654
    return 0.5 * x * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x**3)))


class PositionwiseFeedForward(tutorial.PositionwiseFeedForward):
    def __init__(
        self, d_model: int, d_ff: int, dropout: float = 0.1, activation: str = "gelu_tanh"
    ):
        super().__init__(d_model, d_ff, dropout)  # (the tutorial's table has no tanh GELU)
        self.activation = gelu_tanh


adapter = mutant(BUG_CLASS, ffn_entry(PositionwiseFeedForward, activation="gelu_tanh"))
