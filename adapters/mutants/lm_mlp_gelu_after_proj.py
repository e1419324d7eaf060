"""A GPT-2 style causal LM whose MLP applies its GELU after the output projection,
``gelu(c_proj(c_fc(x)))`` for ``c_proj(gelu(c_fc(x)))``: a call moved one step out. Only
the whole model is offered, so the diagnosis must find the activation's place inside it.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from tck.reference import Config

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "lm_mlp_gelu_after_proj"
EXPECTED_CODES = frozenset({"ffn.activation_misplaced"})


class MLP(gpt_tutorial.MLP):
    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(self.c_proj(self.c_fc(x)), approximate="tanh")  # BUG: after c_proj


class GPT(gpt_tutorial.GPT):
    def __init__(self, c: Config):
        super().__init__(c)
        for block in self.h:
            block.mlp.__class__ = MLP  # the same parameters, the activation moved


adapter = mutant(BUG_CLASS, gpt_entry(GPT))
