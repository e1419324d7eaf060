"""A ViT whose hand-written LayerNorm divides by the root mean square and never subtracts the
mean: ``x / sqrt(x.pow(2).mean(-1) + eps) * w + b`` for ``(x - mean) / sqrt(var + eps) * w +
b``, an RMSNorm with a shift standing where LayerNorm belongs (a port that reuses a Llama
norm, or a refactor that drops the centring line). The layer norms of every block and the
final norm are of this class; only the whole model is offered.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_layer_norm_not_centred"
EXPECTED_CODES = frozenset({"layer_norm.not_centred"})


class LayerNorm(ref.LayerNorm):
    def forward(self, x: Tensor) -> Tensor:
        xs = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        y = xs / torch.sqrt(xs.pow(2).mean(-1, keepdim=True) + self.eps)  # BUG: no - mean
        y = y.to(x.dtype) * self.weight
        return y if self.bias is None else y + self.bias


class ViT(ref.ViT):
    def __init__(self, *args, **kw):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kw)
        for module in self.modules():
            if type(module) is ref.LayerNorm:
                module.__class__ = LayerNorm


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
