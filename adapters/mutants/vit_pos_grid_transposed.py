"""ViT position table read with its grid transposed: the patch rows of ``pos_embed`` reshaped
to the (g, g) grid, transposed and flattened again (an (h, w) / (w, h) mix-up in a port's
interpolation step), so patch (r, c) receives the row of (c, r). The patch embedding, offered
as a subject of its own, is right (SPEC.md §9.1, §9.3).

On the whole ViT alone this output is also what patches read column-major against a
row-major table give (class-token pooling cannot tell which side is permuted); the patch
embedding's own subject, which agrees with the spec, tells them apart.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tck.adapters import TorchEntry
from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_pos_grid_transposed"
EXPECTED_CODES = frozenset({"vit.pos_embed_transformed"})


class ViT(ref.ViT):
    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images)  # (B, N_p, D)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1)
        patch_pos = self.pos_embed[:, 1:]
        g = math.isqrt(patch_pos.shape[1])
        grid = patch_pos.reshape(1, g, g, -1)
        patch_pos = grid.transpose(1, 2).reshape(1, g * g, -1)  # BUG: (w, h) for (h, w)
        x = x + torch.cat([self.pos_embed[:, :1], patch_pos], dim=1)
        x = self.encoder(self.dropout(x))
        return self.head(x[:, 0])


def _patch_embed(c):  # type: ignore[no-untyped-def]
    return ref.PatchEmbedding(c.channels, c.d_model, c.patch_size)


adapter = mutant(
    BUG_CLASS,
    TorchEntry("patch_embed", make=_patch_embed, forward=lambda m, images: m(images)),
    vit_entry(lambda c: ViT(c, VIT_CANONICAL)),
)
