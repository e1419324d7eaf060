"""The attention scale moved onto the query projection's input: BART / OPT style attention
scales the queries once (``q_proj(hidden_states) * self.scaling``) and leaves the scores
unscaled; a refactor that folds the scale into the call, ``q_proj(hidden_states *
self.scaling)``, scales the weight's part of the queries but not the bias (SPEC.md §3.1)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "scale_on_query_input"
EXPECTED_CODES = frozenset({"attention.scale_wrong"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    """The scores unscaled: the queries come scaled."""

    def __init__(self, temperature: float, dropout: float = 0.1):
        super().__init__(1.0, dropout)


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention

    def project(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        # BUG: q_proj(x * scaling), not q_proj(x) * scaling
        return self.w_q(q * self.d_k**-0.5), self.w_k(k), self.w_v(v)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
