"""LayerNorm with its statistics in the input dtype: mean and variance computed the common
way, ``(x - mean).pow(2).mean(-1)``, with no float32 upcast. In float16 the square overflows
once ``|x - mean| > 256`` (65504 is float16's largest value), the variance is inf, and the
row collapses to the bias; trained models carry outlier channels in the hundreds to
thousands (SPEC.md §10.10). torch.nn.LayerNorm's kernel keeps the statistics in float32; in
float32 and float64 this module is correct, so only the float16 checks see it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import layer_norm_entry, mutant

BUG_CLASS = "layer_norm_low_precision"
EXPECTED_CODES = frozenset({"numerics.norm_statistics_low_precision"})  # in float16


class LayerNorm(tutorial.LayerNorm):
    def forward(self, x: Tensor) -> Tensor:
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)  # BUG: squares in x.dtype, no upcast
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


adapter = mutant(BUG_CLASS, layer_norm_entry(LayerNorm))
