"""An encoder layer whose additive mask is filled with float32's minimum whatever the model's
dtype: ``(1.0 - mask) * torch.finfo(torch.float32).min`` where HF's
``get_extended_attention_mask`` takes ``torch.finfo(dtype).min``. In float32 and float64 the
fill is finite and a row whose every key is masked comes out uniform, as declared; in a
float16 or bfloat16 model the fill is -inf, and that row's softmax is NaN
(huggingface/transformers#17306 and its fix: the fill must be the dtype's own minimum). Only
the 16-bit fully-masked row shows it (SPEC.md §4.4, §10.7).
"""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import Conventions

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_mask_fp32_min"
EXPECTED_CODES = frozenset({"numerics.fill_value_overflow"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1) / self.temperature  # (B, H, Lq, Lk)
        lq, lk = attn.shape[-2:]
        keep = torch.ones(lq, lk, dtype=torch.bool, device=attn.device)
        if causal:  # one mask, as get_extended_attention_mask combines them
            keep = keep.tril()
        if mask is not None:
            keep = keep & (mask != 0)
        fill = torch.finfo(torch.float32).min  # BUG: torch.finfo(attn.dtype).min
        attn = attn + (1.0 - keep.to(attn.dtype)) * fill
        return self.dropout(torch.softmax(attn, dim=-1)) @ v


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(
    BUG_CLASS,
    encoder_layer_entry(EncoderLayer, conventions=Conventions(fully_masked_rows="uniform")),
)
