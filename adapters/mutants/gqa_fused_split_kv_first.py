"""Grouped-query attention computed from one fused projection, ``[q | k | v]`` rows stacked
as a checkpoint stores them (GPTBigCode's ``c_attn``), cut back in another order: ``k, v, q =
qkv.split((kv, kv, d))`` for ``q, k, v = qkv.split((d, kv, kv))``. With narrower key/value
heads the parts straddle the boundaries: the keys and values are read from the query's rows
and the query from the rest of the query, the keys and the values (SPEC.md §3.4, §11.2). With
as many key/value heads as query heads it is the three projections exchanged."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "gqa_fused_split_kv_first"
EXPECTED_CODES = frozenset({"attention.qkv_order_wrong"})


class Attention(gpt_tutorial.Attention):
    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        pad_mask: Tensor | None = None,
        cache: Cache | None = None,
    ) -> tuple[Tensor, Cache]:
        b, n, _ = x.shape
        past = 0 if cache is None else cache[0].shape[2]
        if positions is None:
            positions = self.default_positions(b, n, past)
        fused = torch.cat([self.wq(x), self.wk(x), self.wv(x)], dim=-1)  # [q | k | v]
        kv, d = self.wk.out_features, self.wq.out_features
        k, v, q = fused.split((kv, kv, d), dim=-1)  # BUG: cut as k, v, q
        q = q.reshape(b, n, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.reshape(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = v.reshape(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.rope:
            q, k = self.rotate(q, positions), self.rotate(k, positions)
        cache = self.extend_cache(cache, k, v)
        k, v = self.repeat_kv(cache[0]), self.repeat_kv(cache[1])
        att = (q @ k.transpose(-2, -1)) * self.scale()  # (B, H, n, T)
        att = att.masked_fill(self.hidden(n, k.shape[2], past > 0, pad_mask), float("-inf"))
        y = (self.weights(att) @ v).transpose(1, 2).reshape(b, n, -1)
        return self.wo(y), cache


adapter = mutant(BUG_CLASS, attention_entry(Attention))
