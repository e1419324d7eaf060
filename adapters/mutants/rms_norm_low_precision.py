"""RMSNorm with its mean square in the input dtype: ``x * rsqrt(x.pow(2).mean(-1) + eps)``
without the ``hidden_states.to(torch.float32)`` that transformers' ``LlamaRMSNorm`` starts
with. In float16 ``x**2`` overflows once ``|x| > 256`` and the whole row becomes 0 (SPEC.md
§10.10); in float32 and float64 it is correct.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tck.adapters import TorchEntry
from tck.reference import Config

from .tutorial import mutant

BUG_CLASS = "rms_norm_low_precision"
EXPECTED_CODES = frozenset({"numerics.norm_statistics_low_precision"})  # in float16


class RMSNorm(nn.Module):
    """weight * x / sqrt(mean(x^2) + eps), in the style of T5LayerNorm / LlamaRMSNorm."""

    def __init__(self, hidden_size: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: Tensor) -> Tensor:
        variance = hidden_states.pow(2).mean(-1, keepdim=True)  # BUG: no .to(torch.float32)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def _make(c: Config) -> nn.Module:
    return RMSNorm(c.d_model, eps=1e-5)


def _forward(m: nn.Module, x: Tensor) -> Tensor:
    return m(x)


adapter = mutant(
    BUG_CLASS, TorchEntry("rms_norm", make=_make, forward=_forward, param_map={"weight": "weight"})
)
