"""Causal self-attention scaled by 1/sqrt(d_model) instead of 1/sqrt(d_k) (the scale of a
single-head model kept after the heads were split; SPEC.md §3.1): decoder-only attention."""

from __future__ import annotations

import math

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "causal_scale_d_model"
EXPECTED_CODES = frozenset({"attention.scale_wrong"})


class Attention(gpt_tutorial.Attention):
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.n_heads * self.head_dim)  # BUG: d_model, not d_k


adapter = mutant(BUG_CLASS, attention_entry(Attention))
