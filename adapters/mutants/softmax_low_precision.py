"""Softmax formed in the input dtype: ``exp(s) / exp(s).sum(-1)``, written by hand without
the max subtraction and the float32 sum that ``torch.softmax`` keeps for half inputs. In
float32 it is right for every score below 88; in float16 a row of scores near 10 has
exponentials that fit (22026 each) and a sum that does not (past 65504): every weight is
x / inf = 0 and the output is 0. Scores past 11.09 overflow the exponential itself, and the
row is NaN (SPEC.md §10.10).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, mha_entry, mutant

BUG_CLASS = "softmax_low_precision"
# rows whose sum overflows give zeros (named for the softmax); exponentials that overflow
# give NaN (named as an overflow)
EXPECTED_CODES = frozenset({"numerics.softmax_low_precision", "numerics.overflow"})


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
        exp = attn.exp()  # BUG: no max subtracted, and exp and sum stay in attn.dtype
        empty = torch.isneginf(attn).all(-1, keepdim=True)  # a query with no key: zeros
        attn = torch.where(empty, 0.0, exp / exp.sum(-1, keepdim=True))
        return self.dropout(attn) @ v


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


adapter = mutant(
    BUG_CLASS, attention_entry(ScaledDotProductAttention), mha_entry(MultiHeadAttention)
)
