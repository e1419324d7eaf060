"""An activation that centres each row first: ``relu(x - x.mean(-1))``, the activation of a
fused "norm + activation" kernel used where only the activation was meant. Each output
element then depends on every feature of its position (SPEC.md §6.3: act(X)[b, t, d] =
act(X[b, t, d])).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tck.adapters import TorchEntry

from .tutorial import mutant

BUG_CLASS = "activation_row_centered"
EXPECTED_CODES = frozenset({"ffn.not_elementwise"})


class CenteredReLU(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(x - x.mean(-1, keepdim=True))  # BUG: a row statistic


def _forward(m: nn.Module, x: Tensor) -> Tensor:
    return m(x)


adapter = mutant(
    BUG_CLASS, TorchEntry("activation", make=lambda c: CenteredReLU(), forward=_forward)
)
