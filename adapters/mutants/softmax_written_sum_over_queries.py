"""A softmax written out by hand (a numpy model, a port without ``torch.softmax``) whose
maximum runs over the keys and whose sum over the queries: ``e = exp(s - s.max(-1)); e /
e.sum(-2)`` for ``e.sum(-1)``, one axis slipped. The weights are no softmax over either axis
(the row shift no longer cancels), and a padded key column whose every score is masked
divides 0 by 0, so padded rows come out NaN (SPEC.md §3.1)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, mha_entry, mutant

BUG_CLASS = "softmax_written_sum_over_queries"
EXPECTED_CODES = frozenset({"attention.softmax_axis_wrong"})


def softmax(scores: Tensor) -> Tensor:
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-2, keepdim=True)  # BUG: dim=-1


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
        return self.dropout(softmax(attn)) @ v


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


adapter = mutant(
    BUG_CLASS, attention_entry(ScaledDotProductAttention), mha_entry(MultiHeadAttention)
)
