"""A sinusoidal table with a cosine in both members of each pair: the line that fills the
even columns copied from the one that fills the odd ones (``pe[:, 0::2] = torch.cos(...)``),
as a hand-written table such as DistilBERT's ``create_sinusoidal_embeddings`` or the
tutorials' ``PositionalEncoding`` can be broken by one edit. Every pair then holds
(cos, cos) of one angle, which is no rotation: the encoding of p + k is no fixed linear map
of p's (SPEC.md §2.2).
"""

from __future__ import annotations

import math

import torch

from . import tutorial
from .tutorial import mutant, pe_entry

BUG_CLASS = "pe_cos_on_both"
EXPECTED_CODES = frozenset({"positional.pair_function_repeated"})


class PositionalEncoding(tutorial.PositionalEncoding):
    def __init__(self, d_model: int, max_len: int = 5000):
        super().__init__(d_model, max_len)
        pe = self.pe[0]
        angles = torch.arange(max_len, dtype=torch.float64)[:, None] * torch.exp(
            torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model)
        )
        pe[:, 0::2] = torch.cos(angles)  # BUG: torch.sin
        pe[:, 1::2] = torch.cos(angles)


adapter = mutant(BUG_CLASS, pe_entry(PositionalEncoding))
