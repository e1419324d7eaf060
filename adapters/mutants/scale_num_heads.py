"""Attention scaled by 1/sqrt(num_heads) instead of 1/sqrt(head_dim). Cited:
tenstorrent/tt-metal#56789 ("Scale CLIP attention by 1/sqrt(head_dim), not
1/sqrt(num_heads)": the CLIP tutorial's MultiHeadAttention, whose comment said head_dim).
"""

from __future__ import annotations

from .tutorial import MultiHeadAttention as TutorialMHA
from .tutorial import ScaledDotProductAttention, mha_entry, mutant

BUG_CLASS = "scale_num_heads"
EXPECTED_CODES = frozenset({"attention.scale_wrong"})


class MultiHeadAttention(TutorialMHA):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.1):
        super().__init__(d_model, n_heads, dropout)
        self.attention = ScaledDotProductAttention(temperature=n_heads**0.5)  # BUG: heads


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
