"""A ViT ported from a channels-last pipeline (JAX, Keras) whose patch embedding works on
(B, H, W, C) and brings the caller's (B, C, H, W) images there by a reshape instead of a
permute: ``images.reshape(B, H, W, C)`` for ``images.permute(0, 2, 3, 1)``. The shapes agree,
so nothing raises; every "pixel" then holds values of neighbouring pixels and channels
(SPEC.md §9.1)."""

from __future__ import annotations

from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_image_reshaped_to_channels_last"
EXPECTED_CODES = frozenset({"vit.image_layout_wrong"})


class PatchEmbedding(ref.PatchEmbedding):
    def forward(self, images: Tensor) -> Tensor:
        b, c, h, w = images.shape
        channels_last = images.reshape(b, h, w, c)  # BUG: images.permute(0, 2, 3, 1)
        return super().forward(channels_last.permute(0, 3, 1, 2))  # the port's own layout, read


class ViT(ref.ViT):
    def __init__(self, *args, **kw):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kw)
        self.patch_embed.__class__ = PatchEmbedding


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
