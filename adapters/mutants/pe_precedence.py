"""PE frequencies with an operator-precedence bug: ``1 / (10000 ** arange(0, d, 2) / d)``
for ``1 / 10000 ** (arange(0, d, 2) / d)``, i.e. d * 10000^(-2i) (seed 004)."""

from __future__ import annotations

import torch

from . import tutorial
from .tutorial import mutant, pe_entry

BUG_CLASS = "pe_precedence"
EXPECTED_CODES = frozenset({"positional.frequency_wrong"})


class PositionalEncoding(tutorial.PositionalEncoding):
    def __init__(self, d_model: int, max_len: int = 5000):
        super().__init__(d_model, max_len)
        position = torch.arange(0, max_len, dtype=torch.float64).unsqueeze(1)
        i = torch.arange(0, d_model, 2, dtype=torch.float64)
        div_term = 1.0 / (10000.0**i / d_model)  # BUG: ** binds tighter than /
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))


adapter = mutant(BUG_CLASS, pe_entry(PositionalEncoding))
