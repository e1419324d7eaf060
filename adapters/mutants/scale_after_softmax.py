"""The scale applied after the softmax: ``softmax(energy) / scaling`` for
``softmax(energy / scaling)``, the order of operations of a widely copied ViT tutorial. The
scores are unscaled and each weight row sums to 1/sqrt(d_k) (SPEC.md §3.1)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, mha_entry, mutant

BUG_CLASS = "scale_after_softmax"
EXPECTED_CODES = frozenset({"attention.scale_missing"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1)  # BUG: the scale comes after the softmax
        if causal:
            lq, lk = attn.shape[-2:]
            future = torch.ones(lq, lk, dtype=torch.bool, device=attn.device).triu(1)
            attn = attn.masked_fill(future, float("-inf"))
        if mask is not None:
            attn = attn.masked_fill(mask == 0, float("-inf"))
        attn = torch.softmax(attn, dim=-1).nan_to_num(0.0) / self.temperature
        return self.dropout(attn) @ v


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


adapter = mutant(
    BUG_CLASS, attention_entry(ScaledDotProductAttention), mha_entry(MultiHeadAttention)
)
