"""ViT pooled from the wrong token: the head reads the last token, ``x[:, -1]`` (a GPT habit),
where the class token ``x[:, 0]`` is declared."""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_pooled_wrong_token"
EXPECTED_CODES = frozenset({"vit.pooling_wrong_token"})


class ViT(ref.ViT):
    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images)  # (B, N_p, D)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.encoder(self.dropout(torch.cat([cls, x], dim=1) + self.pos_embed))
        return self.head(x[:, -1])  # BUG: the last patch token, not the class token


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
