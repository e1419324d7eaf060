"""Exact GELU written by hand with the wrong argument: ``0.5 * x * (1 + erf(x / 2))`` for
``erf(x / sqrt(2))``, where exact GELU is declared (a port that writes Phi(x) from memory, or
a numpy model with no ``torch.nn.functional.gelu``). The function is none of the catalogue's,
so the diagnosis solves the erf GELU's argument scale and names it, a = 0.5 (SPEC.md §6.1,
§6.3)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import ffn_entry, mutant

BUG_CLASS = "gelu_erf_half"
EXPECTED_CODES = frozenset({"ffn.activation_wrong"})


def gelu(x: Tensor) -> Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / 2.0))  # BUG: x / math.sqrt(2.0)


class PositionwiseFeedForward(tutorial.PositionwiseFeedForward):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1, activation: str = "gelu"):
        super().__init__(d_model, d_ff, dropout, activation)
        self.activation = gelu


adapter = mutant(BUG_CLASS, ffn_entry(PositionwiseFeedForward, activation="gelu"))
