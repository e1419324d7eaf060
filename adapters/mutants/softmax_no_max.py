"""Softmax written out as ``exp(s) / exp(s).sum()``, without subtracting the row maximum: in
float32 scores of a few hundred overflow exp to inf and the weights come out NaN (in float64
the same inputs are finite). Cited: uTensor/uTensor#175 ("exp() call in SoftmaxOp leads to
overflow": a logit of 378 gives exp() inf and a nan result; fixed by #176),
numenta/nupic-legacy#3818 ("Fix softmax overflow"), githubharald/CTCWordBeamSearch#19.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import Conventions

from . import tutorial
from .tutorial import attention_entry, mutant

BUG_CLASS = "softmax_no_max"
EXPECTED_CODES = frozenset({"numerics.overflow"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1) / self.temperature
        if causal:
            lq, lk = attn.shape[-2:]
            future = torch.ones(lq, lk, dtype=torch.bool, device=attn.device).triu(1)
            attn = attn.masked_fill(future, float("-inf"))
        if mask is not None:
            attn = attn.masked_fill(mask == 0, float("-inf"))
        e = torch.exp(attn)  # BUG: no max subtraction
        return self.dropout(e / e.sum(-1, keepdim=True)) @ v


# A query with no key is 0 / 0 here: NaN, declared, so only the overflow is a bug.
adapter = mutant(
    BUG_CLASS,
    attention_entry(ScaledDotProductAttention, conventions=Conventions(fully_masked_rows="nan")),
)
