"""LayerNorm whose statistics run over the sequence and the features together
(``F.layer_norm(x, x.shape[-2:])``, or ``nn.LayerNorm([seq_len, d_model])`` copied from a
vision model that normalises whole feature maps): every position's output depends on every
other position's. In an encoder it shows as positions interacting; in a decoder the future
leaks through the norm, so a causal-leak probe fires first, and the diagnosis must still name
the norm. The class is any norm over the wrong axes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, layer_norm_entry, mutant

BUG_CLASS = "layer_norm_seq_axes"
EXPECTED_CODES = frozenset({"layer_norm.positions_interact"})


class LayerNorm(tutorial.LayerNorm):
    def forward(self, x: Tensor) -> Tensor:
        mean = x.mean((-2, -1), keepdim=True)  # BUG: over (seq, d_model), not d_model
        var = x.var((-2, -1), keepdim=True, unbiased=False)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class EncoderLayer(tutorial.EncoderLayer):
    norm_class = LayerNorm


adapter = mutant(BUG_CLASS, layer_norm_entry(LayerNorm), encoder_layer_entry(EncoderLayer))
