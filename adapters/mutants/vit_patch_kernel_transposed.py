"""A ViT whose patch embedding convolves with the kernel transposed within each patch,
``F.conv2d(images, weight.transpose(2, 3))``: kernel row y meets image column y (a kernel
imported from a framework that stores (kx, ky) and loaded without the transpose back).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_patch_kernel_transposed"
EXPECTED_CODES = frozenset({"vit.patch_kernel_transposed"})


class PatchEmbedding(ref.PatchEmbedding):
    def forward(self, images: Tensor) -> Tensor:
        kernel = self.weight.transpose(2, 3)  # BUG: (D, C, x, y) for (D, C, y, x)
        x = F.conv2d(images, kernel, self.bias, stride=self.patch_size)
        return x.flatten(2).transpose(1, 2)


class ViT(ref.ViT):
    def __init__(self, *args, **kw):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kw)
        self.patch_embed.__class__ = PatchEmbedding


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
