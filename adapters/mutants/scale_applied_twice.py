"""Attention scaled twice: the query is multiplied by ``head_dim ** -0.5`` and the scores are
divided by ``sqrt(head_dim)`` again (an SDPA call left with its default scale), so the
effective scale is 1/d_k. Cited: huggingface/transformers#38290 ("[OPT] Fix attention
scaling": "Scaling has been applied twice to OPT", fixes #38277).
"""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "scale_applied_twice"
EXPECTED_CODES = frozenset({"attention.scale_wrong"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def project(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        # BUG: scaled here, and by 1/temperature again in the attention
        return self.w_q(q) * self.d_k**-0.5, self.w_k(k), self.w_v(v)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
