"""``masked_fill(mask == 0, -1e9)``: the Annotated Transformer's fill value, which float16
cannot hold (its largest magnitude is 65504), so torch raises "value cannot be converted to
type c10::Half without overflow" in half precision. Cited: NVIDIA/apex#1052 (the same error
from ``scores.masked_fill(~mask, -1e9)``), facebookresearch/fairseq#3575 (an encoder
attn_mask's -1e8 in fp16), facebookresearch/mmf#962 (-1e9 replaced by -10000.0).

In float64 and float32 the fill is finite, so a query whose keys are all masked gets uniform
weights (the mean of V): the adapter declares that (fully_masked_rows='uniform'), so the only
bug left is the dtype the fill value does not fit.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import Conventions

from . import tutorial
from .tutorial import attention_entry, mha_entry, mutant

BUG_CLASS = "fill_value_fp16"
EXPECTED_CODES = frozenset({"numerics.fill_value_overflow"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1) / self.temperature
        if causal:
            lq, lk = attn.shape[-2:]
            future = torch.ones(lq, lk, dtype=torch.bool, device=attn.device).triu(1)
            attn = attn.masked_fill(future, -1e9)  # BUG: beyond float16's range
        if mask is not None:
            attn = attn.masked_fill(mask == 0, -1e9)  # BUG: beyond float16's range
        return self.dropout(torch.softmax(attn, dim=-1)) @ v


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


UNIFORM = Conventions(fully_masked_rows="uniform")
adapter = mutant(
    BUG_CLASS,
    attention_entry(ScaledDotProductAttention, conventions=UNIFORM),
    mha_entry(MultiHeadAttention, conventions=UNIFORM),
)
