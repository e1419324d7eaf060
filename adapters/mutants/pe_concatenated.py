"""Sinusoidal PE with sines and cosines concatenated, ``concatenate([sin, cos], -1)``, where
the interleaved layout of the paper is declared (tensorflow/tensorflow#37191)."""

from __future__ import annotations

import math

import torch

from . import tutorial
from .tutorial import mutant, pe_entry

BUG_CLASS = "pe_concatenated"
EXPECTED_CODES = frozenset({"positional.layout_concatenated"})


class PositionalEncoding(tutorial.PositionalEncoding):
    def __init__(self, d_model: int, max_len: int = 5000):
        super().__init__(d_model, max_len)
        position = torch.arange(0, max_len, dtype=torch.float64).unsqueeze(1)
        div_term = torch.exp(
            torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model)
        )
        angles = position * div_term
        pe = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)  # BUG: not interleaved
        self.register_buffer("pe", pe.unsqueeze(0))


adapter = mutant(BUG_CLASS, pe_entry(PositionalEncoding))
