"""A pre-LN encoder layer whose LayerNorm forms its variance in one pass in the input dtype,
``(x * x).mean(-1) - mean**2``, with no float32 upcast: in float16 ``x * x`` overflows past
|x| = 256, the variance is inf and the normalised row collapses to the bias. Inside the
layer the residual stream keeps the outlier channels, so the output moves by the sublayers'
share only (SPEC.md §10.10); correct in float32 and float64.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_layer_norm_half_statistics"
EXPECTED_CODES = frozenset({"numerics.norm_statistics_low_precision"})  # in float16


class LayerNorm(tutorial.LayerNorm):
    def forward(self, x: Tensor) -> Tensor:
        mean = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mean * mean  # BUG: one pass, in x.dtype
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class EncoderLayer(tutorial.EncoderLayer):
    norm_class = LayerNorm


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer, norm_first=True))
