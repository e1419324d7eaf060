"""LayerNorm divides by std + eps instead of sqrt(var + eps) (tracel-ai/burn#2185; the
annotated Transformer's ``a_2 * (x - mean) / (std + eps) + b_2``; seed 000's formula)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, layer_norm_entry, mutant

BUG_CLASS = "layer_norm_std_plus_eps"
EXPECTED_CODES = frozenset({"layer_norm.eps_outside_sqrt"})


class LayerNorm(tutorial.LayerNorm):
    def forward(self, x: Tensor) -> Tensor:
        mean = x.mean(-1, keepdim=True)
        std = torch.sqrt(x.var(-1, keepdim=True, unbiased=False))
        return self.gamma * (x - mean) / (std + self.eps) + self.beta  # BUG: eps outside sqrt


class EncoderLayer(tutorial.EncoderLayer):
    norm_class = LayerNorm


adapter = mutant(BUG_CLASS, layer_norm_entry(LayerNorm), encoder_layer_entry(EncoderLayer))
