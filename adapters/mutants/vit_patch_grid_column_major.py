"""A ViT whose patch embedding reads the conv's (B, D, h, w) output column-major:
``x.permute(0, 3, 2, 1).reshape(B, -1, D)`` (an NCHW / NWHC mix-up), so token n is the patch
at column n // h, row n % h, while the position table is laid out row-major.

Cited: gupta-abhay/pytorch-vit#7 ("layout for vit: NCHW or NHWC?": the unfolded patches
are flattened in an order that mixes the blocks); ultralytics/yolov5#5318 (the tokens must
come from ``x.flatten(2).transpose(1, 2)``).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from tck.reference import VIT_CANONICAL, Config
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_patch_grid_column_major"
EXPECTED_CODES = frozenset({"vit.patch_order"})


class PatchEmbedding(ref.PatchEmbedding):
    def forward(self, images: Tensor) -> Tensor:
        x = F.conv2d(images, self.weight, self.bias, stride=self.patch_size)  # (B, D, h, w)
        return x.permute(0, 3, 2, 1).reshape(x.shape[0], -1, x.shape[1])  # BUG: (w, h, D)


def _make(c: Config) -> nn.Module:
    model = ref.ViT(c, VIT_CANONICAL)
    model.patch_embed = PatchEmbedding(c.channels, c.d_model, c.patch_size)
    return model


adapter = mutant(BUG_CLASS, vit_entry(_make))
