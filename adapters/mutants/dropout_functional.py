"""``F.dropout(attn, p)`` without ``training=self.training``: the functional form defaults to
``training=True``, so ``model.eval()`` does not turn it off and attention weights are dropped
at inference. Cited: pytorch/pytorch#26338 ("Behavior of F.dropout in eval mode"),
rixwew/pytorch-fm#21 (``F.dropout(attn_scores, p=0.1)`` fixed with training=self.training),
Coderx7/SimpleNet#2.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, mha_entry, mutant

BUG_CLASS = "dropout_functional"
EXPECTED_CODES = frozenset({"dropout.active_in_eval"})


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
        attn = torch.softmax(attn, dim=-1).nan_to_num(0.0)
        return F.dropout(attn, p=0.1) @ v  # BUG: training defaults to True


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


adapter = mutant(
    BUG_CLASS, attention_entry(ScaledDotProductAttention), mha_entry(MultiHeadAttention)
)
