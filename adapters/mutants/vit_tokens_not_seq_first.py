"""A ViT written sequence-first (its blocks take (L, B, D), as ``nn.TransformerEncoder`` and
``nn.MultiheadAttention`` do without ``batch_first=True``; the University of Amsterdam tutorial
ViT) whose transpose to that layout is dropped: the (B, L, D) tokens are read as (L, B, D), so
each position attends over the batch, and the pooled ``x[0]`` is every token of the first
image, an output of shape (L, classes) for (B, classes) (SPEC.md §10.2, §9.4, §9.5). Cited:
aipixel/AEMatter#3 (batch-first tensors into a sequence-first module)."""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_tokens_not_seq_first"
EXPECTED_CODES = frozenset({"batch.rows_interact"})


class ViT(ref.ViT):
    def blocks(self, x: Tensor) -> Tensor:
        """The encoder as a sequence-first module: (L, B, D) in and out."""
        return self.encoder(x.transpose(0, 1)).transpose(0, 1)

    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.dropout(torch.cat([cls, x], dim=1) + self.pos_embed)  # (B, L, D)
        x = self.blocks(x)  # BUG: self.blocks(x.transpose(0, 1)), the layout it reads
        return self.head(x[0])  # position 0 of the sequence-first output: the class tokens


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
