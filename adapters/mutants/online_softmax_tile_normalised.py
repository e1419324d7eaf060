"""Attention by FlashAttention's loop (Dao et al. 2022, Algorithm 1: a running maximum, a
running sum and an output accumulator over key blocks of 8, rescaled by exp(m_old - m_new) as
the maximum grows) in which each block's weighted values are divided by the block's own sum
before they are added to the accumulator, which is divided by the running sum again at the
end: a per-block normalisation left in from a single-block kernel. Rows of at most one block
are exact; longer rows weight every block's values wrongly (SPEC.md §3.1)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, encoder_layer_entry, mha_entry, mutant

BUG_CLASS = "online_softmax_tile_normalised"
EXPECTED_CODES = frozenset({"attention.online_softmax_wrong"})
KEY_BLOCK = 8


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
        m = torch.full((*scores.shape[:-1], 1), float("-inf"), dtype=q.dtype)
        total = torch.zeros((*scores.shape[:-1], 1), dtype=q.dtype)
        acc = torch.zeros((*scores.shape[:-1], v.shape[-1]), dtype=q.dtype)
        for start in range(0, lk, KEY_BLOCK):
            block = scores[..., start : start + KEY_BLOCK]
            m_new = torch.maximum(m, block.amax(-1, keepdim=True))
            safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp(block - safe)
            alpha = torch.exp(m - safe)
            block_sum = p.sum(-1, keepdim=True)
            total = total * alpha + block_sum
            pv = p @ v[..., start : start + KEY_BLOCK, :]
            acc = acc * alpha + pv / block_sum.clamp_min(1e-30)  # BUG: + pv
            m = m_new
        return (acc / total).nan_to_num(0.0)  # a query with no key: zeros


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
