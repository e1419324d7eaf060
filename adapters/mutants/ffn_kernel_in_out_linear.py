"""A feed-forward network ported from a framework that stores kernels [in, out] (Flax's
``Dense``, Keras, Paddle's ``Linear``) that keeps that layout and multiplies through
``F.linear``, which takes the weight as [out, in] and computes ``x @ w.T``: the torch habit
carried into the port. Both kernels are non-square (d_model to d_ff and back), so every call
raises ``mat1 and mat2 shapes cannot be multiplied``; a square one would apply the transposed
map silently. Resembles PaddlePaddle/docs#5945 (Paddle's [in, out] Linear weight against
torch's [out, in]).

The adapter maps the kernels as stored (``Param(permute=(1, 0))``), so loading succeeds and
the report must name the orientation from the raising product (SPEC.md §0.2), not a bare
exception.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tck.adapters import Param

from . import tutorial
from .tutorial import ffn_entry, mutant

BUG_CLASS = "ffn_kernel_in_out_linear"
EXPECTED_CODES = frozenset({"params.weight_reshaped"})
RAISES = True  # every call: the kernels are not square


class PositionwiseFeedForward(tutorial.PositionwiseFeedForward):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1, activation: str = "relu"):
        super().__init__(d_model, d_ff, dropout, activation)
        del self.w_1, self.w_2
        self.kernel_1 = nn.Parameter(torch.empty(d_model, d_ff))  # [in, out]
        self.bias_1 = nn.Parameter(torch.zeros(d_ff))
        self.kernel_2 = nn.Parameter(torch.empty(d_ff, d_model))
        self.bias_2 = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: Tensor) -> Tensor:
        # BUG: x @ self.kernel_1 + self.bias_1
        hidden = self.activation(F.linear(x, self.kernel_1, self.bias_1))
        return F.linear(self.dropout(hidden), self.kernel_2, self.bias_2)


PARAM_MAP = {
    "fc1.weight": Param("kernel_1", permute=(1, 0)),
    "fc1.bias": "bias_1",
    "fc2.weight": Param("kernel_2", permute=(1, 0)),
    "fc2.bias": "bias_2",
}

adapter = mutant(
    BUG_CLASS,
    dataclasses.replace(ffn_entry(PositionwiseFeedForward), param_map=PARAM_MAP),
)
