"""A Megatron-LM style attention inside an encoder layer offered alone: each of 2
tensor-parallel ranks fuses the query, key and value rows of its own heads head by head
(its heads' [q, k, v] together, the layout Megatron stores), and the rank's fused output is
split as three blocks (split_tensor_along_last_dim(mixed, 3)) where it belongs per head. Each
head's query, key and value come from the wrong slices of the rank's fused projection; the
shapes agree, so nothing raises (SPEC.md §3.4)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "qkv_per_head_read_as_blocks"
EXPECTED_CODES = frozenset({"attention.qkv_order_wrong"})
RANKS = 2


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, h, d_k = q.size(0), q.size(1), self.n_heads, self.d_k  # self-attention: one L
        heads = h // RANKS
        parts = [
            p.view(b, lq, RANKS, heads, 1, d_k) for p in (self.w_q(q), self.w_k(k), self.w_v(v))
        ]
        mixed = torch.cat(parts, dim=4)  # each rank's heads, each head's [q, k, v]: Megatron's
        mixed = mixed.reshape(b, lq, RANKS, 3 * heads * d_k)
        q, k, v = mixed.chunk(3, dim=-1)  # BUG: per head, not three blocks of the rank
        q, k, v = (t.reshape(b, lq, h, d_k).transpose(1, 2) for t in (q, k, v))
        if mask is not None:
            mask = mask.unsqueeze(1)
        x = self.attention(q, k, v, mask, causal)  # (B, H, Lq, d_k)
        return self.fc(x.transpose(1, 2).reshape(b, lq, h * d_k))


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
