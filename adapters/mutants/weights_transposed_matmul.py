"""Attention weights transposed before they meet the values: ``attn.transpose(-2, -1) @ v``
(what the einsum ``"bhij,bhid->bhjd"`` computes where ``"bhij,bhjd->bhid"`` is meant): output
row j sums the values of the queries with the weights every query gave key j. The softmax
itself is over the keys, as it should be; its result is contracted over the wrong axis
(SPEC.md §3.1). Only a call with as many queries as keys runs it, so the mutant is offered as
an encoder layer (self-attention), as the einsum ViTs and encoders that have it are."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "weights_transposed_matmul"
EXPECTED_CODES = frozenset({"attention.softmax_axis_wrong"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1) / self.temperature  # (B, H, Lq, Lk)
        if causal:
            lq, lk = attn.shape[-2:]
            future = torch.ones(lq, lk, dtype=torch.bool, device=attn.device).triu(1)
            attn = attn.masked_fill(future, float("-inf"))
        if mask is not None:
            attn = attn.masked_fill(mask == 0, float("-inf"))
        attn = torch.softmax(attn, dim=-1).nan_to_num(0.0)
        return self.dropout(attn).transpose(-2, -1) @ v  # BUG: contracted over the queries


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
