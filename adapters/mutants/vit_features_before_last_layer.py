"""A ViT whose head reads the class token from the hidden states before the last layer and
the final norm (``features = hidden_states[-2]`` for ``[-1]``, a list of every layer's
input indexed one too early, as backbones that return intermediate features invite): the
last layer's and the final norm's parameters are loaded and never reach the output
(SPEC.md §7.3, §9.4)."""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_features_before_last_layer"
EXPECTED_CODES = frozenset({"params.unused"})


class ViT(ref.ViT):
    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images)  # (B, N_p, D)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.dropout(torch.cat([cls, x], dim=1) + self.pos_embed)
        hidden_states = []
        for layer in self.encoder.layers:
            hidden_states.append(x)
            x = layer(x)
        hidden_states.append(self.encoder.norm(x))
        return self.head(hidden_states[-2][:, 0])  # BUG: hidden_states[-1]


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
