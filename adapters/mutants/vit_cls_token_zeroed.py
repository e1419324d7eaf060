"""ViT class token replaced by zeros: ``torch.zeros_like(self.cls_token)`` where the learned
token belongs (a refactor that kept the shape and dropped the values), so the loaded
``cls_token`` never reaches the output (SPEC.md §9.2)."""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_cls_token_zeroed"
EXPECTED_CODES = frozenset({"params.unused"})


class ViT(ref.ViT):
    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images)  # (B, N_p, D)
        cls = torch.zeros_like(self.cls_token).expand(x.shape[0], -1, -1)  # BUG: not learned
        x = self.dropout(torch.cat([cls, x], dim=1) + self.pos_embed)
        x = self.encoder(x)
        return self.head(x[:, 0])


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
