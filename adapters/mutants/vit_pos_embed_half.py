"""A ViT that rounds its learned position table to float16 before adding it
(``x + self.positional_embedding.half().to(x.dtype)``, a cast left from a mixed-precision
port, or a checkpoint converted through float16), in every dtype: in float64 and float32 each
position's vector is off by float16's rounding (SPEC.md §9.3, §10.7). The table itself,
read back, is the one loaded. Resembles huggingface/transformers#29285 (position angles
formed in a lower precision than the model's) for a learned table.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import VIT_CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_pos_embed_half"
EXPECTED_CODES = frozenset({"numerics.table_low_precision"})


class ViT(ref.ViT):
    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images)  # (B, N_p, D)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1)
        x = x + self.pos_embed.half().to(x.dtype)  # BUG: the table rounded to float16
        x = self.encoder(self.dropout(x))
        return self.head(x[:, 0])


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
