"""A position-wise FFN with squared ReLU, ``relu(x) ** 2`` (Primer's activation), where the
paper's ReLU is declared: the activation is none of the catalogue's (ReLU, exact GELU, tanh
GELU), so the diagnosis fits parameterised families and names the fitted one,
max(x, 0)^2. Resembles a model ported from a Primer-style config whose ``activation`` field
the port does not read.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import ffn_entry, mutant

BUG_CLASS = "ffn_squared_relu"
EXPECTED_CODES = frozenset({"ffn.activation_wrong"})


class PositionwiseFeedForward(tutorial.PositionwiseFeedForward):
    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(torch.relu(self.w_1(x)) ** 2))  # BUG: ReLU squared


adapter = mutant(BUG_CLASS, ffn_entry(PositionwiseFeedForward))
