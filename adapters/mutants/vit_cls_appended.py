"""A ViT that concatenates the class token after the patch tokens and still pools token 0:
the position table meets the tokens in that order, and the head reads the first patch.
Resembles issues about class-token position in ViT ports (timm's ``no_embed_class`` and
``class_token`` options move it; a port that appends it and keeps ``x[:, 0]`` pools a patch).
"""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_cls_appended"
EXPECTED_CODES = frozenset({"vit.pooling_wrong_token"})


class ViT(ref.ViT):
    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images)  # (B, N_p, D)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.dropout(torch.cat([x, cls], dim=1) + self.pos_embed)  # BUG: class token last
        x = self.encoder(x)
        return self.head(x[:, 0])


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
