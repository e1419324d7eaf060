"""LayerNorm with the unbiased variance: ``x.var(-1)`` (or ``x.std(-1)``) divides by D - 1
where LayerNorm divides by D (harvardnlp/annotated-transformer PR#119)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, layer_norm_entry, mutant

BUG_CLASS = "layer_norm_unbiased"
EXPECTED_CODES = frozenset({"layer_norm.unbiased_variance"})


class LayerNorm(tutorial.LayerNorm):
    def forward(self, x: Tensor) -> Tensor:
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True)  # BUG: torch's default is unbiased (divides by D - 1)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class EncoderLayer(tutorial.EncoderLayer):
    norm_class = LayerNorm


adapter = mutant(BUG_CLASS, layer_norm_entry(LayerNorm), encoder_layer_entry(EncoderLayer))
