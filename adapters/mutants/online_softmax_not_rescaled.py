"""A tiled (online, flash-style) softmax over blocks of 16 keys whose accumulator is not
rescaled when the running maximum grows: ``acc = acc + p @ v`` for ``acc = acc * alpha + p @ v``.
Rows shorter than one block are exact; on longer rows whose maximum moves from block to
block the earlier blocks' values keep too large a weight, and the weights no longer sum to
one (SPEC.md §3.1). Public reports of the class: deepseek-ai/FlashMLA#177 (a missing rescale
of the output in a split-KV combine), PaddleJitLab/CUDATutorial#69 (the running sum not
rescaled in an online softmax)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, encoder_layer_entry, mha_entry, mutant

BUG_CLASS = "online_softmax_not_rescaled"
EXPECTED_CODES = frozenset({"attention.weights_not_normalized", "attention.online_softmax_wrong"})
KEY_BLOCK = 16  # keys per tile


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        scores = q @ k.transpose(-2, -1) / self.temperature  # (B, H, Lq, Lk)
        lq, lk = scores.shape[-2:]
        if causal:
            future = torch.ones(lq, lk, dtype=torch.bool, device=scores.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        running_max = torch.full((*scores.shape[:-1], 1), float("-inf"), dtype=q.dtype)
        running_sum = torch.zeros((*scores.shape[:-1], 1), dtype=q.dtype)
        acc = torch.zeros((*scores.shape[:-1], v.shape[-1]), dtype=q.dtype)
        for start in range(0, lk, KEY_BLOCK):
            block = scores[..., start : start + KEY_BLOCK]
            new_max = torch.maximum(running_max, block.amax(-1, keepdim=True))
            safe = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
            alpha = torch.exp(running_max - safe)
            p = torch.exp(block - safe)
            running_sum = running_sum * alpha + p.sum(-1, keepdim=True)
            acc = acc + p @ v[..., start : start + KEY_BLOCK, :]  # BUG: acc * alpha + ...
            running_max = new_max
        return (acc / running_sum).nan_to_num(0.0)  # a query with no key: zeros


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
