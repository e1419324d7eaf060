"""An encoder layer whose hand-written LayerNorm drops the mean from its numerator only:
``x / sqrt(var + eps)`` for ``(x - mean) / sqrt(var + eps)``, the variance still taken about
the mean (BERT-pytorch's ``mean = x.mean(-1)`` rewritten ``mean = 0`` while ``std =
x.std(-1)`` stays). The rows come out uncentred, shifted by mean / sigma (SPEC.md §5.1)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "layer_norm_numerator_not_centred"
EXPECTED_CODES = frozenset({"layer_norm.not_centred"})


class LayerNorm(tutorial.LayerNorm):
    def forward(self, x: Tensor) -> Tensor:
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        var = xf.var(-1, keepdim=True, unbiased=False)
        y = (xf / torch.sqrt(var + self.eps)).to(x.dtype)  # BUG: (xf - mean)
        return self.gamma * y + self.beta


class EncoderLayer(tutorial.EncoderLayer):
    norm_class = LayerNorm


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer, norm_first=True))
