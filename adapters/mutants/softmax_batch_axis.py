"""Softmax over the batch axis: ``attn.softmax(dim=0)`` on (B, H, Lq, Lk) scores, so each
weight is normalised across the sequences of the batch instead of across the keys; masked
scores are filled with ``torch.finfo(dtype).min`` (the Hugging Face idiom).

Cited: jadore801120/attention-is-all-you-need-pytorch#52 ("softmax's dim is 0, but I think
dim=2 is right"); PetrochukM/PyTorch-NLP#2 (``nn.Softmax(dim=0)`` over the batch dimension:
"it does wrong direction softmax").
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, mha_entry, mutant

BUG_CLASS = "softmax_batch_axis"
EXPECTED_CODES = frozenset({"attention.softmax_axis_wrong"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1) / self.temperature
        hidden = torch.finfo(attn.dtype).min
        if causal:
            lq, lk = attn.shape[-2:]
            future = torch.ones(lq, lk, dtype=torch.bool, device=attn.device).triu(1)
            attn = attn.masked_fill(future, hidden)
        if mask is not None:
            attn = attn.masked_fill(mask == 0, hidden)
        attn = attn.softmax(dim=0)  # BUG: over the batch, not over the keys
        return self.dropout(attn) @ v


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


adapter = mutant(
    BUG_CLASS, attention_entry(ScaledDotProductAttention), mha_entry(MultiHeadAttention)
)
