"""A ViT whose final norm sits in its head (``mlp_head = Sequential(LayerNorm, Linear)``, as
the University of Amsterdam tutorial ViT writes it) and whose pooling takes the mean of every
token for the class token: ``x.mean(dim=0)`` for ``x[0]`` in a sequence-first model. With the
class token the two places of the norm agree; with a mean they do not, and the mean counts
the class token (SPEC.md §9.5, §7.3)."""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_mean_before_head_norm"
EXPECTED_CODES = frozenset({"vit.pooling_mean_with_cls"})


class ViT(ref.ViT):
    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.dropout(torch.cat([cls, x], dim=1) + self.pos_embed)
        for layer in self.encoder.layers:
            x = layer(x)
        pooled = x.mean(dim=1)  # BUG: x[:, 0], the class token
        return self.head(self.encoder.norm(pooled))  # the final norm, in the head


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
