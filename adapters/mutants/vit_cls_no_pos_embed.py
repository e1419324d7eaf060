"""ViT class token without its position embedding: positions are added to the patch tokens
before the class token is prepended, so ``pos_embed[:, 0]`` is loaded but never used."""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_cls_no_pos_embed"
EXPECTED_CODES = frozenset({"vit.cls_pos_embed_missing"})


class ViT(ref.ViT):
    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images)  # (B, N_p, D)
        x = x + self.pos_embed[:, 1:]  # BUG: the class token is prepended after the positions
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.encoder(self.dropout(torch.cat([cls, x], dim=1)))
        return self.head(x[:, 0])


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
