"""An encoder layer whose hand-written LayerNorm adds its shift before applying its gain:
``weight * (x_hat + bias)`` for ``weight * x_hat + bias`` (fair-esm's ``ESM1LayerNorm``
written ``self.weight * (x + self.bias)``), so each feature's shift is scaled by its gain
(SPEC.md §5.1)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "layer_norm_shift_before_gain"
EXPECTED_CODES = frozenset({"layer_norm.shift_before_gain"})


class LayerNorm(tutorial.LayerNorm):
    def forward(self, x: Tensor) -> Tensor:
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        mean = xf.mean(-1, keepdim=True)
        var = xf.var(-1, keepdim=True, unbiased=False)
        y = ((xf - mean) / torch.sqrt(var + self.eps)).to(x.dtype)
        return self.gamma * (y + self.beta)  # BUG: self.gamma * y + self.beta


class EncoderLayer(tutorial.EncoderLayer):
    norm_class = LayerNorm


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer, norm_first=True))
