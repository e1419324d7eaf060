"""CLIP's ``ln_pre`` in a model that claims the paper's ViT: a LayerNorm on the tokens (class
token and position embeddings added) before the first encoder layer. timm names it
``norm_pre`` and enables it only for CLIP-style models (``pre_norm=True``). Cited:
mlfoundations/open_clip#405 (the CLIP ViT normalises after the position embedding, unlike
the original ViT), sagizty/VPT#6 ("Do you miss a norm_pre() layer here?").
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tck.reference import VIT_CANONICAL, Config, Conventions
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_norm_pre"
EXPECTED_CODES = frozenset({"blocks.extra_norm_before_layers"})


class ViT(ref.ViT):
    def __init__(self, config: Config, conventions: Conventions):
        super().__init__(config, conventions)
        self.ln_pre = nn.LayerNorm(config.d_model)  # BUG: CLIP's, not the ViT paper's

    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.ln_pre(torch.cat([cls, x], dim=1) + self.pos_embed)  # BUG
        x = self.encoder(x)
        pooled = x[:, 0] if self.pooling == "cls" else x[:, 1:].mean(dim=1)
        return self.head(pooled)


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
