"""Mask polarity inverted: the 0/1 keep-mask is filled where it is 1, so every query attends
to the padded keys and ignores the real ones (lucidrains/halonet-pytorch#4)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, mha_entry, mutant

BUG_CLASS = "mask_polarity_inverted"
EXPECTED_CODES = frozenset({"mask.polarity_inverted"})


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
            attn = attn.masked_fill(mask.bool(), float("-inf"))  # BUG: fills the kept keys
        attn = torch.softmax(attn, dim=-1).nan_to_num(0.0)
        return self.dropout(attn) @ v


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


adapter = mutant(
    BUG_CLASS, attention_entry(ScaledDotProductAttention), mha_entry(MultiHeadAttention)
)
