"""Multi-head attention (Annotated-Transformer style) whose attention dropout is
``F.dropout(p_attn, p=0.1)``: the functional form defaults to ``training=True``, so
``model.eval()`` does not turn it off.

Bug source: pytorch/pytorch issue #26338 "Behavior of F.dropout in eval mode"; rixwew/pytorch-fm
issue #21 (``F.dropout(attn_scores, p=0.1)`` needs ``training=self.training``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


class MultiHeadedAttention(nn.Module):
    def __init__(self, h: int, d_model: int, dropout: float = 0.1):
        super().__init__()
        self.d_k = d_model // h
        self.h = h
        self.linears = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(4)])
        self.p = dropout

    def forward(self, query, key, value, mask=None):
        nbatches = query.size(0)
        query, key, value = (
            lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value), strict=False)
        )
        scores = query @ key.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        p_attn = scores.softmax(dim=-1)
        p_attn = F.dropout(p_attn, p=self.p)  # the bug: training=True by default
        x = (p_attn @ value).transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.linears[-1](x)


def forward(m, query, key, value, key_padding=None, causal=False):
    mask = None
    if key_padding is not None:
        mask = key_padding[:, None, None, :]
    if causal:
        n, s = query.shape[1], key.shape[1]
        tril = torch.ones(n, s, dtype=torch.bool, device=query.device).tril()
        mask = tril if mask is None else mask & tril
    return m(query, key, value, mask)


ONLY = ("mha",)
LABEL = "dropout.active_in_eval"

names = {"q": 0, "k": 1, "v": 2, "o": 3}
adapter = TorchModuleAdapter(
    "heldout.mha_functional_dropout",
    [
        TorchEntry(
            "mha",
            make=lambda c: MultiHeadedAttention(c.n_heads, c.d_model),
            forward=forward,
            param_map={
                f"{k}.{p}": f"linears.{i}.{p}" for k, i in names.items() for p in ("weight", "bias")
            },
            conventions=Conventions(fully_masked_rows="nan"),
        )
    ],
)
