"""GELU tanh approximation where the exact GELU is declared: a hand-written
0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (huggingface/candle PR#900)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import tutorial
from .tutorial import ffn_entry, mutant

BUG_CLASS = "gelu_tanh"
EXPECTED_CODES = frozenset({"ffn.activation_gelu_tanh"})


def gelu(x: Tensor) -> Tensor:  # BUG: the tanh approximation, not x * Phi(x)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


class PositionwiseFeedForward(tutorial.PositionwiseFeedForward):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1, activation: str = "gelu"):
        super().__init__(d_model, d_ff, dropout, activation)
        self.activation = gelu


adapter = mutant(BUG_CLASS, ffn_entry(PositionwiseFeedForward, activation="gelu"))
