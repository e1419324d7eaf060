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
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, lk, h, d_k = q.size(0), q.size(1), k.size(1), self.n_heads, self.d_k
        values = F.linear(v, self.w_v.weight, self.w_q.bias)  # BUG: the query's bias
        q = self.w_q(q).view(b, lq, h, d_k).transpose(1, 2)
        k = self.w_k(k).view(b, lk, h, d_k).transpose(1, 2)
        v = values.view(b, lk, h, d_k).transpose(1, 2)
        if mask is not None:
            mask = mask.unsqueeze(1)
        x = self.attention(q, k, v, mask, causal)
        x = x.transpose(1, 2).contiguous().view(b, lq, h * d_k)
        return self.fc(x)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
