"""Causal mask dropped: the look-ahead mask goes through an out-of-place ``masked_fill``
whose result is discarded, so every query sees the future (QwenLM/Qwen#933; the same class
as facebookresearch/xformers#103, a causal mask skipped when no other mask is passed)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, mha_entry, mutant

BUG_CLASS = "causal_mask_dropped"
EXPECTED_CODES = frozenset({"mask.causal_leak"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1) / self.temperature
        if causal:
            lq, lk = attn.shape[-2:]
            future = torch.ones(lq, lk, dtype=torch.bool, device=attn.device).triu(1)
            attn.masked_fill(future, float("-inf"))  # BUG: not masked_fill_, result dropped
        if mask is not None:
            attn = attn.masked_fill(mask == 0, float("-inf"))
        attn = torch.softmax(attn, dim=-1).nan_to_num(0.0)
        return self.dropout(attn) @ v


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


adapter = mutant(
    BUG_CLASS, attention_entry(ScaledDotProductAttention), mha_entry(MultiHeadAttention)
)
