"""Fully-masked rows come out NaN: a query whose keys are all masked gets softmax over a row
of -inf, i.e. NaN, while the adapter declares zeros (pytorch/pytorch#103749)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, mha_entry, mutant

BUG_CLASS = "fully_masked_nan"
EXPECTED_CODES = frozenset({"mask.fully_masked_rows_nan"})


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
        attn = torch.softmax(attn, dim=-1)  # BUG: a row of -inf gives NaN, never zeroed
        return self.dropout(attn) @ v


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


adapter = mutant(
    BUG_CLASS, attention_entry(ScaledDotProductAttention), mha_entry(MultiHeadAttention)
)
