"""A ViT that turns its conv patch embedding's (B, D, N) output into tokens with a reshape
where a transpose belongs: ``x.reshape(B, N, D)`` for ``x.permute(0, 2, 1)`` after
``x.reshape(B, D, -1)`` (OpenCLIP's ``VisionTransformer`` writes the two lines), so each token
holds channels of several patches. The patch embedding offered as a subject of its own
ends at the (B, N, D) tokens of the spec and is right: the bug is in the whole model's
forward, and no position table read in another order gives its output (SPEC.md §9.1).
Resembles ultralytics/yolov5#5318 (the tokens must come from ``x.flatten(2).transpose(1, 2)``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from tck.adapters import TorchEntry
from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_tokens_reshaped_not_transposed"
EXPECTED_CODES = frozenset({"vit.patch_order"})


class ViT(ref.ViT):
    def forward(self, images: Tensor) -> Tensor:
        embed = self.patch_embed
        x = F.conv2d(images, embed.weight, embed.bias, stride=embed.patch_size)  # (B, D, h, w)
        x = x.reshape(x.shape[0], x.shape[1], -1)  # (B, D, N)
        x = x.reshape(x.shape[0], x.shape[2], x.shape[1])  # BUG: x.permute(0, 2, 1)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.encoder(self.dropout(x))
        return self.head(x[:, 0])


def _patch_embed(c):  # type: ignore[no-untyped-def]
    return ref.PatchEmbedding(c.channels, c.d_model, c.patch_size)


adapter = mutant(
    BUG_CLASS,
    TorchEntry("patch_embed", make=_patch_embed, forward=lambda m, images: m(images)),
    vit_entry(lambda c: ViT(c, VIT_CANONICAL)),
)
