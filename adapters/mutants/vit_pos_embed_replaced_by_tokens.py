"""ViT position table replaced by the tokens: a refactor of the position step returns its
input where it should return the (interpolated) table, so ``x + pos(x)`` adds the tokens to
themselves. The table is loaded and never read (SPEC.md §9.2, §9.3)."""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_pos_embed_replaced_by_tokens"
EXPECTED_CODES = frozenset({"positional.positions_ignored"})


class ViT(ref.ViT):
    def position_embedding(self, x: Tensor) -> Tensor:
        return x  # BUG: returns the tokens, not self.pos_embed

    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images)  # (B, N_p, D)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1)
        x = x + self.position_embedding(x)
        x = self.encoder(self.dropout(x))
        return self.head(x[:, 0])


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
