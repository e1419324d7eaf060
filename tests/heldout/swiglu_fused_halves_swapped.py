"""A SwiGLU feed-forward with one fused ``w12`` projection whose first half is the gate (as
its loader and parameter map say), but whose forward applies SiLU to the *second* half: gate
and up are swapped.

Bug source: flashinfer-ai/flashinfer pull request #4130 review ("The kernel and test place up in
the first N columns and gate in the second N ... the docs leave the order unstated/reversed,
which is correctness-critical for callers assembling b"); sgl-project/sglang pull request #9661
review (a wrong stacked gate/up mapping).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from tck.adapters import Param, TorchEntry, TorchModuleAdapter


class SwiGLU(nn.Module):
    """w12 = [gate; up] along its output rows; w3 projects back."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w12 = nn.Linear(dim, 2 * hidden)
        self.w3 = nn.Linear(hidden, dim)

    def forward(self, x):
        x1, x2 = self.w12(x).chunk(2, dim=-1)
        return self.w3(x1 * F.silu(x2))  # the bug: x1 is the gate, x2 the up projection


def param_map(c):
    f = c.d_ff
    ours = {"down.weight": "w3.weight", "down.bias": "w3.bias"}
    for p in ("weight", "bias"):
        ours[f"gate.{p}"] = Param(f"w12.{p}", slice=(0, 0, f))
        ours[f"up.{p}"] = Param(f"w12.{p}", slice=(0, f, 2 * f))
    return ours


ONLY = ("gated_ffn",)
LABEL = "ffn.gate_up_swapped"

adapter = TorchModuleAdapter(
    "heldout.swiglu_fused_halves_swapped",
    [
        TorchEntry(
            "gated_ffn",
            make=lambda c: SwiGLU(c.d_model, c.d_ff),
            forward=lambda m, x: m(x),
            param_map=param_map,
        )
    ],
)
