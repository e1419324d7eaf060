"""RoPE layout mix-up: Llama's ``rotate_half`` (pairs x[i], x[i + d/2]) applied where the
interleaved GPT-J/Meta layout (pairs x[2i], x[2i+1]) is declared
(huggingface/transformers#39687)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import mutant, rope_entry

BUG_CLASS = "rope_layout_mixup"
EXPECTED_CODES = frozenset({"rope.layout_half_split"})


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(tutorial.RotaryEmbedding):
    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        freqs = positions.to(self.inv_freq.dtype)[:, None] * self.inv_freq  # (L, d/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # BUG: the half-split layout
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        return x * cos + rotate_half(x) * sin


adapter = mutant(BUG_CLASS, rope_entry(RotaryEmbedding))
