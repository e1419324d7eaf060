"""Gate and up projections swapped in a SwiGLU FFN: SiLU applied to ``w3(x)`` (up) and
multiplied by ``w1(x)`` (gate), a mix-up of Meta's w1/w3 names when porting checkpoints."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import gated_ffn_entry
from .tutorial import mutant

BUG_CLASS = "gate_up_swapped"
EXPECTED_CODES = frozenset({"ffn.gate_up_swapped"})


class SwiGLU(gpt_tutorial.SwiGLU):
    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.act(self.w3(x)) * self.w1(x))  # BUG: w3 activated, not w1


adapter = mutant(BUG_CLASS, gated_ffn_entry(SwiGLU))
