"""Sinusoidal positions counted from padding_idx + 1: fairseq's ``make_positions`` numbers
the first real token padding_idx + 1 ("Position numbers begin at padding_idx+1"), so a
table taken from it, in a model that claims the paper's encoding (position 0 for the first
token), is one or more steps off. Cited: facebookresearch/fairseq#1177, #1187 ("RoBERTa and
514": positions start at padding_idx+1), facebookresearch/esm#132.
"""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mutant, pe_entry

BUG_CLASS = "pe_position_offset"
EXPECTED_CODES = frozenset({"positional.position_offset"})
PADDING_IDX = 0


class PositionalEncoding(tutorial.PositionalEncoding):
    def __init__(self, d_model: int, max_len: int = 5000):
        super().__init__(d_model, max_len + PADDING_IDX + 1)

    def forward(self, x: Tensor) -> Tensor:
        start = PADDING_IDX + 1  # BUG: fairseq's numbering, not the paper's
        return x + self.pe[:, start : start + x.size(1)]


adapter = mutant(BUG_CLASS, pe_entry(PositionalEncoding))
