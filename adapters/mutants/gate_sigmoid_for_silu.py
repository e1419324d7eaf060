"""A SwiGLU whose gate is ``torch.sigmoid`` where SiLU belongs (``x * sigmoid(x)``): the
gate's x dropped when an activation was rewritten by hand (llama2.c's
``val *= 1.0f / (1.0f + expf(-val))``, ported as ``sigmoid(val)``), so every gate value
lies in (0, 1) (SPEC.md §11.3)."""

from __future__ import annotations

import torch

from . import gpt_tutorial
from .gpt_tutorial import gated_ffn_entry
from .tutorial import mutant

BUG_CLASS = "gate_sigmoid_for_silu"
EXPECTED_CODES = frozenset({"ffn.activation_wrong"})


class SwiGLU(gpt_tutorial.SwiGLU):
    def __init__(self, dim: int, hidden: int, bias: bool = True):
        super().__init__(dim, hidden, bias)
        self.act = torch.sigmoid  # BUG: SiLU is x * sigmoid(x)


adapter = mutant(BUG_CLASS, gated_ffn_entry(SwiGLU))
