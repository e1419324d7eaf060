"""A hand-written LayerNorm whose variance comes from ``torch.var``, which is *unbiased*
(divides by D - 1) unless told otherwise; eps is inside the sqrt as in nn.LayerNorm.

Bug source: harvardnlp/annotated-transformer pull request #119 ("by default,
``torch.Tensor.std()`` uses an unbiased estimate ... ``nn.LayerNorm()`` uses biased estimate");
LBANN/lbann pull request #2024 (LayerNorm used the unbiased estimate, unlike PyTorch).
"""

from __future__ import annotations

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter


class LayerNorm(nn.Module):
    def __init__(self, features: int, eps: float = 1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(features))
        self.beta = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True)  # the bug: torch.var divides by D - 1 by default
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


ONLY = ("layer_norm",)
LABEL = "layer_norm.unbiased_variance"

adapter = TorchModuleAdapter(
    "heldout.ln_unbiased_var",
    [
        TorchEntry(
            "layer_norm",
            make=lambda c: LayerNorm(c.d_model),
            forward=lambda m, x: m(x),
            param_map={"weight": "gamma", "bias": "beta"},
        )
    ],
)
