"""A mean-pooled ViT whose mean counts the class token: ``x.mean(dim=1)`` over all N_p + 1
tokens, where mean pooling (declared here, pooling='mean') averages the patch tokens only.
Cited: lucidrains/vit-pytorch#226 ("Average pool mean taking cls token into account as
well": ``x = x.mean(dim = 1) if self.pool == 'mean' else x[:, 0]``),
ViCCo-Group/thingsvision#169 ("the standard case definitely is pooling across all tokens
but the cls token").
"""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import Conventions
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_mean_with_cls"
EXPECTED_CODES = frozenset({"vit.pooling_mean_with_cls"})
DECLARED = Conventions(norm_placement="pre", activation="gelu", pooling="mean")


class ViT(ref.ViT):
    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.encoder(self.dropout(torch.cat([cls, x], dim=1) + self.pos_embed))
        return self.head(x.mean(dim=1))  # BUG: the class token is averaged in


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, DECLARED), conventions=DECLARED))
