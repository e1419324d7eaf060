"""A softmax guarded against rows with no key by an eps in its denominator:
``e / (e.sum(-1) + 1e-6)`` for ``e / e.sum(-1)`` (with ``e = exp(s - max s)``), as tiled
kernels and hand-written attention write ``l + eps`` where a ``where(l == 0, 1, l)`` was meant.
Every weight row sums to slightly less than 1; in float64 that is a finding, and the eps is
solved for (SPEC.md §3.1)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, mha_entry, mutant

BUG_CLASS = "softmax_denominator_eps"
EXPECTED_CODES = frozenset({"attention.weights_not_normalized"})


def softmax(scores: Tensor) -> Tensor:
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True)).nan_to_num(0.0)
    return e / (e.sum(dim=-1, keepdim=True) + 1e-6)  # BUG: an eps for a where() guard


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
