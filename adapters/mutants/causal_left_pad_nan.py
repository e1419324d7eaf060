"""A query with no visible key left NaN, except in an all-padding sequence: the kernel zeroes
the rows of a sequence whose padding mask is all False (the empty-sequence contract of the
packed, variable-length kernels, which skip such a sequence), but under a causal mask with
left padding the first queries of a padded row see only pads, and their softmax over nothing
is 0/0. The adapter declares fully_masked_rows='zero' (SPEC.md §4.4); the all-padding row of
masks.fully_masked_rows comes out as zeros."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, encoder_layer_entry, mha_entry, mutant

BUG_CLASS = "causal_left_pad_nan"
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
        attn = torch.softmax(attn, dim=-1)
        if mask is not None:  # BUG: only an all-padding sequence is zeroed, not every empty row
            attn = attn.masked_fill((mask == 0).all(dim=-1, keepdim=True), 0.0)
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
