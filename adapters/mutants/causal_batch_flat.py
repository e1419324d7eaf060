"""A causal mask built from batch-flat key indices: key j of batch row b is numbered
b * Lk + j, as in the flattened (B * L) layout a variable-length kernel indexes, and
compared with the query's index within its own row. Row 0 is right; every later row's
queries see no key at all under a causal mask (the index % L is missing). Without a causal
mask nothing changes (SPEC.md §4.3, §10.2)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, encoder_layer_entry, mha_entry, mutant

BUG_CLASS = "causal_batch_flat"
EXPECTED_CODES = frozenset({"mask.causal_batch_flat"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1) / self.temperature  # (B, H, Lq, Lk)
        if causal:
            b, _, lq, lk = attn.shape
            key_index = torch.arange(b * lk, device=attn.device).view(b, 1, 1, lk)  # BUG: % lk
            query_index = torch.arange(lq, device=attn.device).view(1, 1, lq, 1)
            attn = attn.masked_fill(key_index > query_index, float("-inf"))
        if mask is not None:
            attn = attn.masked_fill(mask == 0, float("-inf"))
        attn = torch.softmax(attn, dim=-1).nan_to_num(0.0)  # a query with no key: zeros
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
