"""The padding mask and the causal mask combined with OR: ``keep = padding | causal`` (or
``torch.maximum`` of two additive masks, or ``mask.bool() + causal`` read as a boolean),
so a key is attended when either mask keeps it: real keys after a query leak, and padded
keys before it are attended. §4.1's AND read as OR; the neighbouring public reports are of
one mask dropped in the combination (huggingface/candle#3609: Qwen2's padding mask built
without the causal triangle), which ``mask.causal_leak`` and ``mask.ignored`` name."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, encoder_layer_entry, mha_entry, mutant

BUG_CLASS = "mask_combined_with_or"
EXPECTED_CODES = frozenset({"mask.combined_with_or"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1) / self.temperature
        keep = None
        if causal:
            lq, lk = attn.shape[-2:]
            keep = torch.ones(lq, lk, dtype=torch.bool, device=attn.device).tril()
        if mask is not None:
            keep = mask != 0 if keep is None else keep | (mask != 0)  # BUG: OR, not AND
        if keep is not None:
            attn = attn.masked_fill(~keep, float("-inf"))
        attn = torch.softmax(attn, dim=-1).nan_to_num(0.0)
        return self.dropout(attn) @ v


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(
    BUG_CLASS,
    attention_entry(ScaledDotProductAttention),
    mha_entry(MultiHeadAttention),
    encoder_layer_entry(EncoderLayer),
)
