"""A RoPE cos/sin table laid out for interleaved pairs (Meta's layout,
``repeat_interleave(freqs, 2)``) fed to ``rotate_half``, which pairs (i, i + d/2): channel i
and its partner i + d/2 are turned by the angles of pairs i // 2 and (i + d/2) // 2, so the
map is no rotation at all (it is not norm-preserving), and no frequency table reproduces it.
Position 0 is exact, so the bug shows from the second token on (SPEC.md §2.3)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry, rotate_half
from .tutorial import mutant

BUG_CLASS = "rope_table_interleaved"
EXPECTED_CODES = frozenset({"rope.table_layout_mismatch"})


class Attention(gpt_tutorial.Attention):
    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:  # x (B, H, n, hd)
        inv_freq = self.inv_freq.to(positions.device)
        freqs = positions.double()[:, None, :, None] * inv_freq  # (B, 1, n, hd/2)
        emb = torch.repeat_interleave(freqs, 2, dim=-1)  # BUG: for torch.cat((freqs, freqs))
        return x * emb.cos().to(x.dtype) + rotate_half(x) * emb.sin().to(x.dtype)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
