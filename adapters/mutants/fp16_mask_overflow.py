"""fp16 mask overflow: the mask adds ``torch.finfo(dtype).min`` to the scores; in float16 a
negative score plus -65504 overflows to -inf, and a query whose keys are all masked gets
softmax over -inf, i.e. NaN (huggingface/transformers PR#17306, fixed by clamping the sum).

In float64 nothing overflows: a fully-masked row becomes finfo.min everywhere, i.e. uniform
weights (the mean of V), which the float64 suite already reports against the declared zeros.
The dtype sweep (``numerics.fully_masked_rows``, SPEC.md §10.7) builds it in float16, where
the NaN appears.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, mha_entry, mutant

BUG_CLASS = "fp16_mask_overflow"
EXPECTED_CODES = frozenset({"mask.fully_masked_rows_nan"})  # in float16
FLOAT64_CODES = frozenset({"mask.fully_masked_rows_uniform"})  # what float64 shows of it
# One bug, two named causes: the finite finfo.min fill gives uniform rows in float64 and
# overflows to NaN in float16; either is a right top-ranked cause (the benchmark).
TOP_CAUSES = EXPECTED_CODES | FLOAT64_CODES


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1) / self.temperature
        min_value = torch.finfo(attn.dtype).min
        if causal:
            lq, lk = attn.shape[-2:]
            future = torch.ones(lq, lk, dtype=attn.dtype, device=attn.device).triu(1)
            attn = attn + future * min_value
        if mask is not None:
            attn = attn + (1.0 - mask.to(attn.dtype)) * min_value  # BUG: no clamp to finfo.min
        attn = torch.softmax(attn, dim=-1)
        return self.dropout(attn) @ v


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


def _entries() -> list:
    return [attention_entry(ScaledDotProductAttention), mha_entry(MultiHeadAttention)]


adapter = mutant(BUG_CLASS, *_entries())
