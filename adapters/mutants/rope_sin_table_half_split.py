"""RoPE whose cos and sin tables are expanded in two layouts: the cosines for the half-split
pairs ``rotate_half`` uses (``torch.cat((freqs, freqs))``), the sines for interleaved pairs
(``repeat_interleave(freqs, 2)``, GPT-J's ``duplicate_interleave`` left on one of the two
after a port to ``rotate_half``): a channel's cosine and sine belong to two frequencies, so
the map is no rotation. Position 0 is exact (SPEC.md §2.3)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry, rotate_half
from .tutorial import mutant

BUG_CLASS = "rope_sin_table_half_split"
EXPECTED_CODES = frozenset({"rope.table_layout_mismatch"})


class Attention(gpt_tutorial.Attention):
    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:  # x (B, H, n, hd)
        inv_freq = self.inv_freq.to(positions.device)
        freqs = positions.double()[:, None, :, None] * inv_freq  # (B, 1, n, hd/2)
        cos = torch.cat((freqs, freqs), dim=-1).cos()
        sin = torch.repeat_interleave(freqs, 2, dim=-1).sin()  # BUG: for torch.cat
        return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
