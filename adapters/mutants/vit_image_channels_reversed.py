"""A ViT whose patch embedding reverses the image's channels before its kernel
(``pixel_values.flip(1)``: an RGB checkpoint fed BGR by a port that copied an OpenCV
pipeline's conversion). The shapes agree and the images stay images; each kernel channel
meets another colour (SPEC.md §9.1)."""

from __future__ import annotations

from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_image_channels_reversed"
EXPECTED_CODES = frozenset({"vit.channel_order_wrong"})


class PatchEmbedding(ref.PatchEmbedding):
    def forward(self, images: Tensor) -> Tensor:
        return super().forward(images.flip(1))  # BUG: images


class ViT(ref.ViT):
    def __init__(self, *args, **kw):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kw)
        self.patch_embed.__class__ = PatchEmbedding


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
