"""Dropout active in eval: ``dropout_p`` is passed to F.scaled_dot_product_attention
unconditionally, which applies it whatever ``module.training`` says
(pytorch/pytorch#124464)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, mha_entry, mutant

BUG_CLASS = "dropout_in_eval"
EXPECTED_CODES = frozenset({"dropout.active_in_eval"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        keep = None if mask is None else mask != 0
        if causal:
            lq, lk = q.shape[-2], k.shape[-2]
            past = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril()
            keep = past if keep is None else keep & past
        return F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=keep,
            dropout_p=self.dropout.p,  # BUG: not `self.dropout.p if self.training else 0.0`
            scale=1.0 / self.temperature,
        )


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


adapter = mutant(
    BUG_CLASS, attention_entry(ScaledDotProductAttention), mha_entry(MultiHeadAttention)
)
