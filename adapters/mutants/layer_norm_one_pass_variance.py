"""LayerNorm with the variance formed in one pass, ``E[x^2] - E[x]^2``: exact in real
numbers, but in float32 the two terms cancel when a row's mean is large against its spread
(a mean of 1e4 squares to 1e8, where float32's spacing is 8), so the variance becomes zero,
a multiple of 8, or negative. flax's ``nn.LayerNorm`` computes it this way when
``use_fast_variance=True`` (its default); cited: google/flax#3824 ("LayerNorm ... numerically
unstable" one-pass variance), NVIDIA/apex#1111-style fused norms that keep a running sum of
squares."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, layer_norm_entry, mutant

BUG_CLASS = "layer_norm_one_pass_variance"
EXPECTED_CODES = frozenset({"numerics.norm_variance_cancels"})


class LayerNorm(tutorial.LayerNorm):
    def forward(self, x: Tensor) -> Tensor:
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        mean = xf.mean(-1, keepdim=True)
        var = (xf * xf).mean(-1, keepdim=True) - mean * mean  # BUG: one pass, cancels
        y = ((xf - mean) / torch.sqrt(var + self.eps)).to(x.dtype)
        return self.gamma * y + self.beta


class EncoderLayer(tutorial.EncoderLayer):
    norm_class = LayerNorm


adapter = mutant(
    BUG_CLASS,
    layer_norm_entry(LayerNorm),
    encoder_layer_entry(EncoderLayer, norm_first=True),
)
