"""A ViT fed channels-last images (B, H, W, C), as an image loader or a Keras port hands
them over, that brings them to the convolution's (B, C, H, W) by a reshape instead of a
permute: ``images.reshape(B, C, H, W)`` for ``images.permute(0, 3, 1, 2)``. The shapes agree,
so nothing raises; every patch then mixes pixels of other rows and the channels of
neighbouring pixels (SPEC.md §9.1)."""

from __future__ import annotations

from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_image_channels_last_reshaped"
EXPECTED_CODES = frozenset({"vit.image_layout_wrong"})


class PatchEmbedding(ref.PatchEmbedding):
    def forward(self, images: Tensor) -> Tensor:
        channels_last = images.permute(0, 2, 3, 1).contiguous()  # the loader's (B, H, W, C)
        b, h, w, c = channels_last.shape
        return super().forward(channels_last.reshape(b, c, h, w))  # BUG: permute(0, 3, 1, 2)


class ViT(ref.ViT):
    def __init__(self, *args, **kw):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kw)
        self.patch_embed.__class__ = PatchEmbedding


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
