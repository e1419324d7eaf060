"""A boolean "masked" tensor (True = padding or future, the ``nn.MultiheadAttention``
convention) cast to float and added to the scores as if it were an additive 0 / -inf bias:
hidden keys get +1, the others +0, so nothing is hidden (padding and the future both leak).

Cited: huggingface/diffusers#14342 ("a torch.bool mask is consumed as an additive 0/1 ...
neither a mask nor a no-op"); open-mmlab/mmdetection#11803 (an all-False mask turned into
+1 on every score, "equivalent to adding 1 to attn_weights").
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "mask_added_padding"
EXPECTED_CODES = frozenset({"mask.added_as_bias"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1) / self.temperature
        lq, lk = attn.shape[-2:]
        hidden = torch.zeros(lq, lk, dtype=torch.bool, device=attn.device)
        if causal:
            hidden = hidden | torch.ones_like(hidden).triu(1)
        if mask is not None:
            hidden = hidden | (mask == 0)
        attn = attn + hidden.to(attn.dtype)  # BUG: a bool mask added, not masked_fill(-inf)
        return self.dropout(torch.softmax(attn, dim=-1)) @ v


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
