"""Batch rows leak into each other: LayerNorm statistics taken over the whole tensor
(``x.mean()``, ``x.var()`` without ``dim=-1``), i.e. across the batch and the positions."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import layer_norm_entry, mutant

BUG_CLASS = "batch_leak"
# the root cause is the norm's axes (every axis, the batch among them); the rows' interaction
# is what the batch check sees of it
EXPECTED_CODES = frozenset({"batch.rows_interact", "layer_norm.positions_interact"})


class LayerNorm(tutorial.LayerNorm):
    def forward(self, x: Tensor) -> Tensor:
        mean = x.mean()  # BUG: over every batch row and position, not dim=-1
        var = x.var(unbiased=False)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


adapter = mutant(BUG_CLASS, layer_norm_entry(LayerNorm))
