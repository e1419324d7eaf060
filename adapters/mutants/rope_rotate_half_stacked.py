"""RoPE in the ``x * cos + rotate_half(x) * sin`` form whose ``rotate_half`` writes its
halves interleaved: ``torch.stack((-x2, x1), dim=-1).flatten(-2)`` for
``torch.cat((-x2, x1), dim=-1)``, beside a half-split cos/sin table (``cat(freqs, freqs)``).
Channel 2i then meets the partner of pair i while turning by pair (2i mod d/2)'s angle: no
rotation, norms change (SPEC.md §2.3, §2.4)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "rope_rotate_half_stacked"
EXPECTED_CODES = frozenset({"rope.table_layout_mismatch"})


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)  # BUG: torch.cat((-x2, x1), dim=-1)


class Attention(gpt_tutorial.Attention):
    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:  # x (B, H, n, hd)
        inv_freq = self.inv_freq.to(positions.device)
        freqs = positions.double()[:, None, :, None] * inv_freq  # (B, 1, n, hd/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return x * emb.cos().to(x.dtype) + rotate_half(x) * emb.sin().to(x.dtype)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
