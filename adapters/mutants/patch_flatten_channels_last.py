"""Patches flattened channels-last against a conv-ordered weight: lucidrains/vit-pytorch's
``Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2 c)')`` with a projection weight taken from a
conv patch embedding (timm's ``nn.Conv2d``, flattened (c, p1, p2)) by a plain reshape.
Cited: lucidrains/vit-pytorch#184 (the two patch embeddings side by side), lucidrains/vit-
pytorch#352 (patch dimension order "prevents direct weight loading or requires manual weight
permutation, which is error-prone").
"""

from __future__ import annotations

from torch import Tensor, nn

from tck.reference import VIT_CANONICAL, Config
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "patch_flatten_channels_last"
EXPECTED_CODES = frozenset({"vit.patch_flatten_order"})


class PatchEmbedding(ref.PatchEmbedding):
    def forward(self, images: Tensor) -> Tensor:
        b, c, h, w = images.shape
        p = self.patch_size
        patches = images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)
        patches = patches.reshape(b, (h // p) * (w // p), p * p * c)  # (p1 p2 c)
        weight = self.weight.reshape(self.weight.shape[0], -1)  # BUG: (c p1 p2) order
        return patches @ weight.T + self.bias


def _make(c: Config) -> nn.Module:
    model = ref.ViT(c, VIT_CANONICAL)
    model.patch_embed = PatchEmbedding(c.channels, c.d_model, c.patch_size)
    return model


adapter = mutant(BUG_CLASS, vit_entry(_make))
