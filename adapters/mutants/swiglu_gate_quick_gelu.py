"""A gated FFN whose gate uses x * sigmoid(1.702 x) (CLIP's QuickGELU) where SwiGLU's
SiLU, x * sigmoid(x), is declared: an activation none of the declared gate activations
names; the diagnosis solves the sigmoid's slope and names it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import gated_ffn_entry
from .tutorial import mutant

BUG_CLASS = "swiglu_gate_quick_gelu"
EXPECTED_CODES = frozenset({"ffn.activation_wrong"})


class SwiGLU(gpt_tutorial.SwiGLU):
    def forward(self, x: Tensor) -> Tensor:
        gate = self.w1(x)
        return self.w2(gate * torch.sigmoid(1.702 * gate) * self.w3(x))  # BUG: slope 1.702


adapter = mutant(BUG_CLASS, gated_ffn_entry(SwiGLU))
