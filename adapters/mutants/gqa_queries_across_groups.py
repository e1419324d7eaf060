"""Grouped-query attention whose per-group query layout, ``(H_kv, g, hd)`` as a fused
per-group projection stores it (InternLM2's ``wqkv``), is transposed to ``(g, H_kv, hd)``
before the reshape to heads: query i of group j becomes head ``i * H_kv + j`` instead of
``j * g + i``, so each query head meets another group's key/value head while its output
keeps its own place (SPEC.md §3.3, §11.2)."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry, llama_block_entry
from .tutorial import mutant

BUG_CLASS = "gqa_queries_across_groups"
EXPECTED_CODES = frozenset({"attention.heads_split_wrong_order"})


class Attention(gpt_tutorial.Attention):
    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = super().project(x)
        b, _, n, hd = q.shape
        grouped = q.transpose(1, 2).reshape(b, n, self.n_kv_heads, self.n_rep, hd)
        q = grouped.transpose(2, 3).reshape(b, n, self.n_heads, hd)  # BUG: no transpose(2, 3)
        return q.transpose(1, 2), k, v


class Block(gpt_tutorial.Block):
    attention = Attention


adapter = mutant(BUG_CLASS, attention_entry(Attention), llama_block_entry(Block))
