"""Heads merged feature-major within each tensor-parallel rank, inside an encoder layer
offered alone: Megatron-LM's column-parallel attention gives each of 2 ranks half of the
heads, and each rank merges its (B, H/2, L, d) context as (B, L, d, H/2) before the
row-parallel output projection joins the ranks' blocks (context.permute(2, 0, 3, 1) for
permute(2, 0, 1, 3) in its [s, b, h] layout). Feature j of the rank's head h lands at
channel j*H/2 + h of the rank's block; nothing crosses positions, so only the oracle
comparison sees it (SPEC.md §3.3)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "heads_merged_per_rank"
EXPECTED_CODES = frozenset({"attention.heads_merged_wrong_order"})
RANKS = 2


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def merge_heads(self, x: Tensor) -> Tensor:  # x: (B, H, Lq, d_k)
        b, _, lq, _ = x.shape
        shards = x.chunk(RANKS, dim=1)  # each rank's heads
        # BUG: each rank merges (B, L, d, H/2), not (B, L, H/2, d)
        return torch.cat([s.permute(0, 2, 3, 1).reshape(b, lq, -1) for s in shards], dim=-1)


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
