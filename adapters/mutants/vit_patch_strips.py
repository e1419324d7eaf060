"""A ViT that cuts its patches by reshape alone, without the transpose that brings each
patch's rows together: ``images.reshape(B, C, gh, p, gw, p).reshape(B, C, N, p * p)``
instead of ``.permute(0, 2, 4, 1, 3, 5)`` first, so a "patch" is p rows of p pixels taken
across the grid, not a p x p square (the einops ``rearrange`` of big_vision and timm rewritten
as plain reshapes). The weight is the conv's (D, C, p, p), flattened (c, y, x).
"""

from __future__ import annotations

from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_patch_strips"
EXPECTED_CODES = frozenset({"vit.patch_extraction_wrong"})


class PatchEmbedding(ref.PatchEmbedding):
    def forward(self, images: Tensor) -> Tensor:
        b, c, h, w = images.shape
        p = self.patch_size
        n = (h // p) * (w // p)
        patches = images.reshape(b, c, n, p * p)  # BUG: (B, C, gh, p, gw, p) never permuted
        patches = patches.permute(0, 2, 1, 3).reshape(b, n, c * p * p)  # (c, y, x) per token
        return patches @ self.weight.reshape(self.weight.shape[0], -1).T + self.bias


class ViT(ref.ViT):
    def __init__(self, *args, **kw):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kw)
        self.patch_embed.__class__ = PatchEmbedding


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
