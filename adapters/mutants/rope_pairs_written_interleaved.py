"""RoPE that rotates the interleaved pairs (x_2i, x_2i+1) by the right angles and writes
each rotated pair back as the two halves: ``torch.cat((a', b'), -1)`` where
``torch.stack((a', b'), -1).flatten(-2)`` belongs (llama2.c's pair loop ported with the
output line of a rotate_half RoPE). Every pair turns right but lands on other channels, so
even position 0 permutes the features (SPEC.md §2.3). Inside one head's attention the same
permutation of q and k leaves every score alone; the rotation's own output shows it, and
so does a rotation over the whole projection, which moves channels across heads."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import mutant, rope_entry

BUG_CLASS = "rope_pairs_written_interleaved"
EXPECTED_CODES = frozenset({"rope.table_layout_mismatch"})


class RotaryEmbedding(tutorial.RotaryEmbedding):
    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        freqs = positions.to(self.inv_freq.dtype)[:, None] * self.inv_freq  # (L, d/2)
        cos, sin = freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)  # BUG: stack+flatten


adapter = mutant(BUG_CLASS, rope_entry(RotaryEmbedding))
