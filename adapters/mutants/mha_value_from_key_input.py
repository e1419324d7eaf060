"""The value projection applied to the key input: ``v = self.w_v(k)`` for ``self.w_v(v)``,
the right weights on the wrong tensor. Self-attention passes one tensor as both, so only a
call with distinct key and value inputs (cross-attention, a module called as ``mha(q, k, v)``)
shows it (SPEC.md §3.4, §3.5)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "mha_value_from_key_input"
EXPECTED_CODES = frozenset({"attention.input_read_wrong"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        return super().forward(q, k, k, mask, causal)  # BUG: (q, k, v): w_v reads the keys


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
