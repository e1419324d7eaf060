"""A sinusoidal positional encoding with base 1000 where the paper has 10000 (a dropped zero);
the table is computed in float64, sines at even and cosines at odd channels.

Bug source: maxjcohen/transformer issue #62 "Position Encoding" (``torch.pow(1000, ...)``:
"1000 should be changed to 10000").
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, max_len: int = 512):
        super().__init__()
        position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
        # the bug: log(1000), not log(10000)
        div_term = torch.exp(
            torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(1000.0) / d_model)
        )
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, positions):
        return self.pe[positions]


ONLY = ("sinusoidal_pe",)
LABEL = "positional.base_wrong"

adapter = TorchModuleAdapter(
    "heldout.pe_base_1000",
    [
        TorchEntry(
            "sinusoidal_pe",
            make=lambda c: PositionalEncoding(c.d_model, c.max_len),
            forward=lambda m, positions: m(positions),
        )
    ],
)
