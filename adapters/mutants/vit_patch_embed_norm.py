"""A LayerNorm inside the ViT patch embedding (timm's ``PatchEmbed(norm_layer=nn.LayerNorm)``,
Swin's patch embedding) in a model that claims the paper's ViT, whose patch embedding is a
linear projection only. Cited: facebookresearch/dino#33 ("PatchEmbed does not have a norm
layer neither in DeiT, ViT nor DINO"), huggingface/pytorch-image-models#1666 (normalisation
in Swin's PatchEmbed, not in ViT's), 920232796/SETR-pytorch#1 (a LayerNorm after the patch
projection that "neither the ViT paper and code applies").
"""

from __future__ import annotations

from torch import Tensor, nn

from tck.reference import VIT_CANONICAL, Config
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_patch_embed_norm"
EXPECTED_CODES = frozenset({"vit.extra_norm_in_patch_embed"})


class PatchEmbedding(ref.PatchEmbedding):
    def __init__(self, channels: int, d_model: int, patch_size: int):
        super().__init__(channels, d_model, patch_size)
        self.norm = nn.LayerNorm(d_model)  # BUG: not in the ViT paper

    def forward(self, images: Tensor) -> Tensor:
        return self.norm(super().forward(images))


def _make(c: Config) -> nn.Module:
    model = ref.ViT(c, VIT_CANONICAL)
    model.patch_embed = PatchEmbedding(c.channels, c.d_model, c.patch_size)
    return model


adapter = mutant(BUG_CLASS, vit_entry(_make))
