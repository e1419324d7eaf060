"""A sinusoidal positional encoding that loops ``for i in range(0, d_model, 2)`` and then uses
``2 * i / d_model`` in the exponent: i already steps by two, so every frequency is squared
(10000^(-4k/d) where the paper has 10000^(-2k/d)). The table is computed in float64.

Bug source: SamLynnEvans/Transformer issue #25 "A little error in Positional Encoder";
intro-llm/intro-llm.github.io issue #34 (the same loop, ``10000 ** ((2 * i)/d_model)``).
"""

from __future__ import annotations

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter


class PositionalEncoder(nn.Module):
    def __init__(self, d_model: int, max_seq_len: int = 512):
        super().__init__()
        pos = torch.arange(max_seq_len, dtype=torch.float64)[:, None]
        i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 0, 2, 4, ...
        angle = pos / (10000 ** ((2 * i) / d_model))  # the bug: i is already 2k
        pe = torch.zeros(max_seq_len, d_model, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(angle)
        pe[:, 1::2] = torch.cos(angle)
        self.register_buffer("pe", pe)

    def forward(self, positions):
        return self.pe[positions]


ONLY = ("sinusoidal_pe",)
# Relabelled after the first measurement (it was positional.frequency_wrong): 10000^(-4k/d) is
# exactly (10000^2)^(-2k/d), a sinusoidal table with base 1e8; no output can tell the two
# apart, so the wrong base is the objectively right name (the report says "base 1e+08").
LABEL = "positional.base_wrong"

adapter = TorchModuleAdapter(
    "heldout.pe_double_two_i",
    [
        TorchEntry(
            "sinusoidal_pe",
            make=lambda c: PositionalEncoder(c.d_model, c.max_len),
            forward=lambda m, positions: m(positions),
        )
    ],
)
