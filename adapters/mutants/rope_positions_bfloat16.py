"""RoPE whose position ids are rounded to bfloat16 before the angles are formed, whatever the
model's dtype: ``positions.to(torch.bfloat16)`` ahead of the float64 frequencies (a positions
buffer made with the model's 16-bit dtype, ``torch.arange(L, dtype=torch.bfloat16)``). Past
256 bfloat16 has no integer spacing, so neighbouring positions share one rotation and far
tokens get their neighbour's angle, in a float64 build as well (SPEC.md §2.3, §10.10)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import mutant, rope_entry

BUG_CLASS = "rope_positions_bfloat16"
EXPECTED_CODES = frozenset({"numerics.rope_angles_low_precision"})


class RotaryEmbedding(tutorial.RotaryEmbedding):
    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        held = positions.to(torch.bfloat16).to(self.inv_freq.dtype)  # BUG: no bfloat16 step
        freqs = held[:, None] * self.inv_freq  # (L, d/2)
        cos, sin = freqs.cos().repeat_interleave(2, -1), freqs.sin().repeat_interleave(2, -1)
        rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
        return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


adapter = mutant(BUG_CLASS, rope_entry(RotaryEmbedding))
