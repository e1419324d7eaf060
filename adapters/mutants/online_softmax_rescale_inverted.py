"""Attention by the memory-efficient algorithm of Rabe & Staats ("Self-attention does not
need O(n^2) memory", 2021): keys in tiles of 4, each tile summarised by its maximum, its sum of
exponentials and its exponential-weighted values, the summaries rescaled to the overall
maximum and added. Here the rescaling factor is inverted, ``exp(global_max - tile_max)`` for
``exp(tile_max - global_max)``: a sign slip in the combination step. Rows of at most one tile
are exact; longer rows weight their tiles wrongly, and a query with a chunk whose keys are
all masked overflows the factor and turns NaN (SPEC.md §3.1). A public report of the class:
deepseek-ai/FlashMLA#177 (a split-KV combine whose partial outputs are not rescaled)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, encoder_layer_entry, mha_entry, mutant

BUG_CLASS = "online_softmax_rescale_inverted"
EXPECTED_CODES = frozenset({"attention.online_softmax_wrong"})
KEY_CHUNK = 4


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        scores = q @ k.transpose(-2, -1) / self.temperature  # (B, H, Lq, Lk)
        lq, lk = scores.shape[-2:]
        fill = torch.finfo(scores.dtype).min
        if causal:
            future = torch.ones(lq, lk, dtype=torch.bool, device=scores.device).triu(1)
            scores = scores.masked_fill(future, fill)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, fill)
        hidden = scores == fill
        values, sums, maxima = [], [], []
        for start in range(0, lk, KEY_CHUNK):
            cut = slice(start, start + KEY_CHUNK)
            chunk_max = scores[..., cut].amax(dim=-1, keepdim=True).detach()
            weights = torch.exp(scores[..., cut] - chunk_max).masked_fill(hidden[..., cut], 0.0)
            values.append(weights @ v[..., cut, :])
            sums.append(weights.sum(dim=-1, keepdim=True))
            maxima.append(chunk_max)
        chunk_max = torch.stack(maxima)
        global_max = chunk_max.amax(dim=0, keepdim=True)
        factors = torch.exp(global_max - chunk_max)  # BUG: exp(chunk_max - global_max)
        all_values = (torch.stack(values) * factors).sum(dim=0)
        all_sums = (torch.stack(sums) * factors).sum(dim=0)
        out = all_values / all_sums
        return out.masked_fill(hidden.all(dim=-1, keepdim=True), 0.0)  # a query with no key


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
