"""An RMSNorm that *divides* by ``torch.rsqrt(mean(x^2) + eps)``: it multiplies by the RMS
instead of dividing by it.

Bug source: mosaicml/llm-foundry issue #371 "Incorrect implementation of RMSNorm" (``output = x
/ torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)``; fixed by pull request #372).
"""

from __future__ import annotations

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # the bug: rsqrt is already the reciprocal, so this multiplies by the RMS
        output = x / torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return output * self.weight


ONLY = ("rms_norm",)
LABEL = "layer_norm.rms_wrong_statistics"

adapter = TorchModuleAdapter(
    "heldout.rms_divides_by_rsqrt",
    [TorchEntry("rms_norm", make=lambda c: RMSNorm(c.d_model), forward=lambda m, x: m(x))],
)
