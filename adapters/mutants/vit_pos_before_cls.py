"""A ViT that adds the leading rows of its position table to the patch tokens and prepends
the class token afterwards: the class token gets no position embedding and patch i gets row
i, where the paper gives it row i + 1 (``pos_embed[:, 0]`` still reaches the logits, through
the first patch, so a probe that moves that row sees a change).

Cited: labmlai/annotated_deep_learning_paper_implementations#221 ("fix cls_token bug in
vit": the class token must be concatenated before the position embedding is added);
huggingface/pytorch-image-models#2014 (the class token's overlap with the position table).
"""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_pos_before_cls"
EXPECTED_CODES = frozenset({"vit.cls_pos_embed_missing"})


class ViT(ref.ViT):
    def forward(self, images: Tensor) -> Tensor:
        patches = self.patch_embed(images)
        n = patches.shape[1]
        patches = patches + self.pos_embed[:, :n]  # BUG: rows 0..n-1, before the class token
        tokens = torch.cat([self.cls_token.expand(patches.shape[0], -1, -1), patches], dim=1)
        x = self.encoder(self.dropout(tokens))
        return self.head(x[:, 0])


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
