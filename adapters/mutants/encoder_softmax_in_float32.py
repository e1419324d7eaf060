"""An encoder layer whose attention softmax runs in float32 whatever the model's dtype
(``softmax(scores.float()).type_as(scores)``, a mixed-precision habit kept in a float64
build). Its masked scores are filled with ``finfo(dtype).min`` (a query whose keys are all
masked spreads evenly: ``fully_masked_rows='uniform'``), but float64's minimum cast to
float32 overflows to -inf, so such a row is 0 / 0: the NaN is the float32 step's, not a
fill policy (SPEC.md §4.4, §10.12)."""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import Conventions

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_softmax_in_float32"
EXPECTED_CODES = frozenset({"numerics.float32_island"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1) / self.temperature
        low = torch.finfo(attn.dtype).min
        if causal:
            lq, lk = attn.shape[-2:]
            future = torch.ones(lq, lk, dtype=torch.bool, device=attn.device).triu(1)
            attn = attn.masked_fill(future, low)
        if mask is not None:
            attn = attn.masked_fill(mask == 0, low)
        weights = torch.softmax(attn.float(), dim=-1).type_as(attn)  # BUG: softmax(attn)
        return self.dropout(weights) @ v


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(
    BUG_CLASS,
    encoder_layer_entry(
        EncoderLayer,
        norm_first=True,
        conventions=Conventions(norm_placement="pre", fully_masked_rows="uniform"),
    ),
)
