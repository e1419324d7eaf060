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

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, lk, h, d_k = q.size(0), q.size(1), k.size(1), self.n_heads, self.d_k
        q = self.w_q(q * d_k**-0.5)  # BUG: q_proj(x * scaling), not q_proj(x) * scaling
        q = q.view(b, lq, h, d_k).transpose(1, 2)
        k = self.w_k(k).view(b, lk, h, d_k).transpose(1, 2)
        v = self.w_v(v).view(b, lk, h, d_k).transpose(1, 2)
        if mask is not None:
            mask = mask.unsqueeze(1)
        x = self.attention(q, k, v, mask, causal)
        x = x.transpose(1, 2).contiguous().view(b, lq, h * d_k)
        return self.fc(x)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
