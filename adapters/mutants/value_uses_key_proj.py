"""Value projection uses the key weights: ``v = self.w_k(v)``, a copy-paste slip that leaves
``w_v`` unused (seed 004)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "value_uses_key_proj"
EXPECTED_CODES = frozenset({"attention.value_uses_key_projection"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def project(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.w_q(q), self.w_k(k), self.w_k(v)  # BUG: w_k, not w_v


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
