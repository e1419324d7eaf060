"""An encoder layer whose attention softmax is taken in bfloat16 whatever the model's dtype
(``softmax(attn, dim=-1, dtype=torch.bfloat16).to(attn.dtype)``, where an eager port keeps
``dtype=torch.float32``): a float64 or float32 build rounds every attention weight to
bfloat16's 8 bits (SPEC.md §10.10, §10.12)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_softmax_in_bfloat16"
EXPECTED_CODES = frozenset({"numerics.softmax_low_precision"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def weights(self, scores: Tensor) -> Tensor:
        # BUG: dtype=torch.bfloat16 (dtype=torch.float32, or none)
        pinned = torch.softmax(scores, dim=-1, dtype=torch.bfloat16)
        return pinned.to(scores.dtype).nan_to_num(0.0)


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
