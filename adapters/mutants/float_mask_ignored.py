"""Float vs bool mask mix-up: the 0/1 keep-mask is cast to float and handed to
F.scaled_dot_product_attention, which ADDS a float mask to the scores, so 0 and 1 hide
nothing and the padding is silently attended (pytorch/pytorch#92554)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, mha_entry, mutant

BUG_CLASS = "float_mask_ignored"
EXPECTED_CODES = frozenset({"mask.added_as_bias"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        if mask is not None:
            mask = mask.to(q.dtype)  # BUG: a float mask is additive, not a keep-mask
        if causal:
            lq, lk = q.shape[-2], k.shape[-2]
            future = torch.ones(lq, lk, dtype=torch.bool, device=q.device).triu(1)
            look_ahead = torch.zeros(lq, lk, dtype=q.dtype).masked_fill(future, float("-inf"))
            mask = look_ahead if mask is None else mask + look_ahead
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1 / self.temperature)


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


adapter = mutant(
    BUG_CLASS, attention_entry(ScaledDotProductAttention), mha_entry(MultiHeadAttention)
)
