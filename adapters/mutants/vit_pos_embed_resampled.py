"""ViT position table resampled at its own grid: the interpolation meant for another image
size runs at the native one too (DINOv2's ``interpolate_pos_encoding`` without its shortcut,
with its ``interpolate_offset``: scale factor (g + 0.1) / g), so the patch tokens receive a
bicubic blend of neighbouring rows instead of their own row. The class token's row is kept.
DINOv2's ``vision_transformer.py`` returns the table unchanged when the patch grid is the
native one; this port dropped that test (SPEC.md §9.2, §9.3)."""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.nn import functional as F

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_pos_embed_resampled"
EXPECTED_CODES = frozenset({"vit.pos_embed_transformed"})
OFFSET = 0.1  # DINOv2's interpolate_offset


class ViT(ref.ViT):
    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images)  # (B, N_p, D)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1)
        patch_pos = self.pos_embed[:, 1:]
        g = math.isqrt(patch_pos.shape[1])
        grid = patch_pos.reshape(1, g, g, -1).permute(0, 3, 1, 2)
        scale = (g + OFFSET) / g
        # BUG: resampled at the native size too (the shortcut for it skipped)
        grid = F.interpolate(grid, scale_factor=(scale, scale), mode="bicubic")
        patch_pos = grid.permute(0, 2, 3, 1).reshape(1, g * g, -1)
        x = x + torch.cat([self.pos_embed[:, :1], patch_pos], dim=1)
        x = self.encoder(self.dropout(x))
        return self.head(x[:, 0])


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
