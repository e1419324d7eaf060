"""SiLU replaced by GELU in a SwiGLU FFN (``ACT2FN["gelu"]`` where the config says "silu"):
GeGLU computed where SwiGLU is declared."""

from __future__ import annotations

import torch.nn.functional as F

from . import gpt_tutorial
from .gpt_tutorial import gated_ffn_entry
from .tutorial import mutant

BUG_CLASS = "swiglu_gelu"
EXPECTED_CODES = frozenset({"ffn.gate_activation_gelu"})


class SwiGLU(gpt_tutorial.SwiGLU):
    def __init__(self, dim: int, hidden: int, bias: bool = True):
        super().__init__(dim, hidden, bias)
        self.act = F.gelu  # BUG: GELU, not SiLU


adapter = mutant(BUG_CLASS, gated_ffn_entry(SwiGLU))
