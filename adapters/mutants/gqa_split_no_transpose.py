"""A Llama-style attention with grouped-query heads that splits its projections by a plain
view, ``xq.view(B, H, L, hd)``, instead of ``view(B, L, H, hd).transpose(1, 2)``: the keys and
values (H_kv heads) likewise. Each "head" then holds a block of several positions' channels,
RoPE rotates them at the wrong positions, and the causal mask hides the wrong keys. Cited:
hyunwoongko/transformer#15 (``x.view(batch_size, self.num_heads, seq_len, d)`` proposed in
place of the view + transpose, and why it "ruins embedding vectors of the (word) tokens"),
bentrevett/pytorch-seq2seq#148 (the same question for ``Q.view(batch_size, self.n_heads, -1,
self.head_dim)``), reczoo/FuxiCTR#30 (the bug shipped in three models).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "gqa_split_no_transpose"
EXPECTED_CODES = frozenset({"attention.heads_split_wrong_order"})


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
        q = self.wq(x).view(b, self.n_heads, n, self.head_dim)  # BUG: no view + transpose
        k = self.wk(x).view(b, self.n_kv_heads, n, self.head_dim)  # BUG
        v = self.wv(x).view(b, self.n_kv_heads, n, self.head_dim)  # BUG
        if self.rope:
            q, k = self.rotate(q, positions), self.rotate(k, positions)
        cache = self.extend_cache(cache, k, v)
        k, v = self.repeat_kv(cache[0]), self.repeat_kv(cache[1])
        att = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        att = att.masked_fill(self.future_mask(n, k.shape[2], past > 0), float("-inf"))
        if pad_mask is not None:
            att = att.masked_fill(pad_mask[:, None, None, :] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1).nan_to_num(0.0)
        y = (att @ v).transpose(1, 2).reshape(b, n, -1)
        return self.wo(y), cache


adapter = mutant(BUG_CLASS, attention_entry(Attention))
