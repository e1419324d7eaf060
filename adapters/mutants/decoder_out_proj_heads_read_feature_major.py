"""A decoder-only attention whose output projection reads the merged heads in the other
order: its weight, kept as (n_heads, head_dim, dim) by an einsum-style codebase
(TransformerLens' ``W_O``), is permuted to (head_dim, n_heads, dim) before it is flattened, so
weight row ``j*H + h`` meets context channel ``j*H + h`` where row ``h*d + j`` belongs: each
output channel weighs another head's features. One token per call is wrong as well; nothing
crosses positions, so the cache and mask properties hold (SPEC.md §3.3)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache
from .tutorial import mutant

BUG_CLASS = "decoder_out_proj_heads_read_feature_major"
EXPECTED_CODES = frozenset({"attention.heads_merged_wrong_order"})


class Attention(gpt_tutorial.Attention):
    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        pad_mask: Tensor | None = None,
        cache: Cache | None = None,
    ) -> tuple[Tensor, Cache]:
        b, n, dim = x.shape
        past = 0 if cache is None else cache[0].shape[2]
        if positions is None:
            positions = self.default_positions(b, n, past)
        q, k, v = self.project(x)
        if self.rope:
            q, k = self.rotate(q, positions), self.rotate(k, positions)
        cache = self.extend_cache(cache, k, v)
        k, v = self.repeat_kv(cache[0]), self.repeat_kv(cache[1])
        att = (q @ k.transpose(-2, -1)) * self.scale()
        att = self.masked(att, n, past > 0, pad_mask)
        y = (self.weights(att) @ v).transpose(1, 2).reshape(b, n, -1)
        w_o = self.wo.weight.T.reshape(self.n_heads, self.head_dim, dim)  # (H, d, D)
        w = w_o.permute(1, 0, 2).reshape(self.n_heads * self.head_dim, dim).T  # BUG: no permute
        return F.linear(y, w, self.wo.bias), cache


adapter = mutant(BUG_CLASS, gpt_tutorial.attention_entry(Attention))
