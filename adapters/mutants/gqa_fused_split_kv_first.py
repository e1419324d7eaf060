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
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "gqa_fused_split_kv_first"
EXPECTED_CODES = frozenset({"attention.qkv_order_wrong"})


class Attention(gpt_tutorial.Attention):
    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, n, _ = x.shape
        fused = torch.cat([self.wq(x), self.wk(x), self.wv(x)], dim=-1)  # [q | k | v]
        kv, d = self.wk.out_features, self.wq.out_features
        k, v, q = fused.split((kv, kv, d), dim=-1)  # BUG: cut as k, v, q
        q = q.reshape(b, n, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.reshape(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = v.reshape(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        return q, k, v


adapter = mutant(BUG_CLASS, attention_entry(Attention))
