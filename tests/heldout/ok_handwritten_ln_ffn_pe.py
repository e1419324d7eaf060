"""CORRECT: a hand-written LayerNorm (biased variance, eps inside the sqrt), the
Annotated-Transformer position-wise FFN (``w_2(relu(w_1(x)))``) and the sinusoidal table of the
2017 paper computed in float64, looked up by position.

Style source: the Annotated Transformer's PositionwiseFeedForward and PositionalEncoding, with
the LayerNorm nn.LayerNorm documents (``torch.var(input, unbiased=False)``). It must pass with
zero failures.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter


class LayerNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x):
        wide = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        mean = wide.mean(-1, keepdim=True)
        var = wide.var(-1, keepdim=True, unbiased=False)
        y = ((wide - mean) / torch.sqrt(var + self.eps)).type_as(x)
        return y * self.weight + self.bias


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(self.w_1(x).relu())


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, max_len: int = 512):
        super().__init__()
        position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
        div_term = torch.exp(
            torch.arange(0, d_model, 2, dtype=torch.float64) * -(math.log(10000.0) / d_model)
        )
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, positions):
        return self.pe[positions]


ONLY = ("layer_norm", "ffn", "sinusoidal_pe")
LABEL = None

adapter = TorchModuleAdapter(
    "heldout.ok_handwritten_ln_ffn_pe",
    [
        TorchEntry("layer_norm", make=lambda c: LayerNorm(c.d_model), forward=lambda m, x: m(x)),
        TorchEntry(
            "ffn",
            make=lambda c: PositionwiseFeedForward(c.d_model, c.d_ff),
            forward=lambda m, x: m(x),
            param_map={f"fc{i}.{p}": f"w_{i}.{p}" for i in (1, 2) for p in ("weight", "bias")},
        ),
        TorchEntry(
            "sinusoidal_pe",
            make=lambda c: PositionalEncoding(c.d_model, c.max_len),
            forward=lambda m, positions: m(positions),
        ),
    ],
)
