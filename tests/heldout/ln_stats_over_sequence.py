"""A LayerNorm whose mean and standard deviation are taken over the *sequence* axis of
[B, L, D] instead of the feature axis: every position's output depends on the others.

Bug source: jadore801120/attention-is-all-you-need-pytorch pull request #17 ("Your original
implementation computes the mean and standard-deviation along the dimension ``seq_len``. But
the Layer Normalization should compute these values along the dimension ``feature_dim``");
bkitano/llama-from-scratch issue #4 (RMS over (T, D) instead of D).
"""

from __future__ import annotations

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter


class LayerNormalization(nn.Module):
    def __init__(self, d_hid: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.a_2 = nn.Parameter(torch.ones(d_hid))
        self.b_2 = nn.Parameter(torch.zeros(d_hid))

    def forward(self, z):  # z: [batch, seq_len, d_hid]
        mu = z.mean(dim=1, keepdim=True)  # the bug: dim=1 is seq_len
        var = ((z - mu) ** 2).mean(dim=1, keepdim=True)
        return (z - mu) / torch.sqrt(var + self.eps) * self.a_2 + self.b_2


ONLY = ("layer_norm",)
LABEL = "layer_norm.positions_interact"

adapter = TorchModuleAdapter(
    "heldout.ln_stats_over_sequence",
    [
        TorchEntry(
            "layer_norm",
            make=lambda c: LayerNormalization(c.d_model),
            forward=lambda m, x: m(x),
            param_map={"weight": "a_2", "bias": "b_2"},
        )
    ],
)
