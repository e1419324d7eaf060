"""A model whose conventions, shared by all its subjects, declare its norms' float32
statistics (Meta's ``x.float()``, SPEC.md §10.12), while its attention forms the RoPE angles
in float32 too (``positions.float() * inv_freq.float()``), which it does not declare. The
declaration is about a step the attention does not hold; taken as a blanket, it let every
float64 check of the attention pass at the float32 bound. The attention must be measured as
if it declared nothing: one undeclared island, ``numerics.float32_island``. Resembles
huggingface/transformers#29285 (RoPE angles formed in a lower precision than the model's,
autocast to bfloat16).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry, rotate_half
from .tutorial import mutant

BUG_CLASS = "rope_float32_beside_declared_norms"
EXPECTED_CODES = frozenset({"numerics.float32_island"})


class Attention(gpt_tutorial.Attention):
    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        inv_freq = self.inv_freq.to(positions.device).float()
        freqs = positions.float()[:, None, :, None] * inv_freq  # BUG: angles in float32
        emb = torch.cat((freqs, freqs), dim=-1)
        return x * emb.cos().to(x.dtype) + rotate_half(x) * emb.sin().to(x.dtype)


entry = attention_entry(Attention)
adapter = mutant(
    BUG_CLASS,
    dataclasses.replace(
        entry,
        # the model's declaration, shared by its subjects: its norms' statistics in float32
        conventions=dataclasses.replace(entry.conventions, float32_steps=("norm_statistics",)),
    ),
)
