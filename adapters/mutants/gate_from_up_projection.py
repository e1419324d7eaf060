"""A SwiGLU FFN whose gate is computed from the up projection: ``silu(w3(x)) * w3(x)`` for
``silu(w1(x)) * w3(x)``, a one-letter slip in Meta's w1 / w3 names (SPEC.md §11.3). The gate
weight w1 is never used; the pair is confused, not exchanged."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import gated_ffn_entry
from .tutorial import mutant

BUG_CLASS = "gate_from_up_projection"
EXPECTED_CODES = frozenset({"ffn.gate_up_swapped"})


class SwiGLU(gpt_tutorial.SwiGLU):
    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.act(self.w3(x)) * self.w3(x))  # BUG: w3 for the gate, w1 unused


adapter = mutant(BUG_CLASS, gated_ffn_entry(SwiGLU))
