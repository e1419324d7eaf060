"""A mean-pooled ViT (pooling='mean', declared) that concatenates the class token after the
patch tokens and still averages tokens 1..N: the position table meets the tokens in that
order, and the mean counts the class token while it leaves out the first patch (SPEC.md
§9.2, §9.5). The same slip as ``vit_cls_appended`` under mean pooling (MAE's
``global_pool``, ``x[:, 1:, :].mean(dim=1)``)."""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import Conventions
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_cls_appended_mean_pool"
EXPECTED_CODES = frozenset({"vit.pooling_mean_with_cls"})
DECLARED = Conventions(norm_placement="pre", activation="gelu", pooling="mean")


class ViT(ref.ViT):
    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([x, cls], dim=1) + self.pos_embed  # BUG: the class token last
        x = self.encoder(self.dropout(x))
        return self.head(x[:, 1:].mean(dim=1))


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, DECLARED), conventions=DECLARED))
