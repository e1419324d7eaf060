"""Scale 1/sqrt(d_model) instead of 1/sqrt(d_k): the attention temperature is taken from the
model width, not the head width (omihub777/ViT-CIFAR#11: ``self.sqrt_d = self.feats**0.5``)."""

from __future__ import annotations

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "scale_d_model"
EXPECTED_CODES = frozenset({"attention.scale_wrong"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.1):
        super().__init__(d_model, n_heads, dropout)
        self.attention = tutorial.ScaledDotProductAttention(
            temperature=d_model**0.5,  # BUG: sqrt(d_model), not sqrt(d_k)
            dropout=dropout,
        )


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
