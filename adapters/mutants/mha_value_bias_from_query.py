"""Multi-head attention whose value projection adds the query projection's bias,
``F.linear(v, w_v.weight, w_q.bias)``: one leaf of a module read from its sibling (a
copy-paste of the query line with only the weight renamed); the weights are all its own.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "mha_value_bias_from_query"
EXPECTED_CODES = frozenset({"params.read_from_other_module"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def project(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        values = F.linear(v, self.w_v.weight, self.w_q.bias)  # BUG: the query's bias
        return self.w_q(q), self.w_k(k), values


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
