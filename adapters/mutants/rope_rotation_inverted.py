"""Causal self-attention whose RoPE turns the other way: ``x * cos - rotate_half(x) * sin``
where the spec adds (the sign of sin flipped, as a port that writes ``rotate_half`` as
``cat(x2, -x1)`` does). Queries and keys turn alike, so each score still depends only on the
distance between two positions, with the sign of that distance reversed: position-0 calls
and the norm are unchanged, and only comparisons at several positions see it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry, rotate_half
from .tutorial import mutant

BUG_CLASS = "rope_rotation_inverted"
EXPECTED_CODES = frozenset({"rope.rotation_inverted"})


class Attention(gpt_tutorial.Attention):
    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        inv_freq = self.inv_freq.to(positions.device)
        freqs = positions.double()[:, None, :, None] * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return x * emb.cos().to(x.dtype) - rotate_half(x) * emb.sin().to(x.dtype)  # BUG: -


adapter = mutant(BUG_CLASS, attention_entry(Attention))
