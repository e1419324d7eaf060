"""A ViT whose stochastic depth decays to a rate of 0.1 at its last block (the linear decay
rule of timm and MMSegmentation, ``dpr = linspace(0, drop_path_rate, depth)``) and whose
``drop_path`` lost its training guard: that one block's feed-forward branch is dropped per
image with probability 0.1 in evaluation too (SPEC.md §10.1). A batch of two agrees with
itself on most pairs of calls; what shows it is a wide batch called several times.
Resembles huggingface/pytorch-image-models' ``drop_path`` copied without ``not training``."""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_last_block_drop_path"
EXPECTED_CODES = frozenset({"dropout.active_in_eval"})
DROP_PROB = 0.1


def drop_path(x: Tensor, drop_prob: float, training: bool) -> Tensor:
    if drop_prob == 0.0:  # BUG: `if drop_prob == 0.0 or not training`
        return x
    keep = 1.0 - drop_prob
    mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
    return x * mask / keep


class ViT(ref.ViT):
    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images)  # (B, N_p, D)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.dropout(torch.cat([cls, x], dim=1) + self.pos_embed)
        layers = self.encoder.layers
        rates = torch.linspace(0, DROP_PROB, len(layers)).tolist()
        for layer, rate in zip(layers, rates, strict=True):
            x = x + layer.self_attn(*(layer.norm1(x),) * 3)
            x = x + drop_path(layer.ffn(layer.norm2(x)), rate, self.training)
        return self.head(self.encoder.norm(x)[:, 0])


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
