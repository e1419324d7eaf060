"""Grouped-query attention whose keys are tiled over the query heads while the values are
repeated in place: ``k.repeat(1, n_rep, 1, 1)`` (query head h reads key head h mod H_kv) beside
``v.repeat_interleave(n_rep, dim=1)`` (head h reads value head h // n_rep). Each half alone
looks like one of the two ways of writing ``repeat_kv``; mixed, each query scores one group's
keys and reads another's values. The broadcast of the keys on the wrong axis
(``k[:, None]`` for ``k[:, :, None]``) gives the same.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "gqa_keys_tiled"
EXPECTED_CODES = frozenset({"attention.kv_heads_tiled"})


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
        q = self.wq(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.rope:
            q, k = self.rotate(q, positions), self.rotate(k, positions)
        cache = self.extend_cache(cache, k, v)
        k = cache[0].repeat(1, self.n_rep, 1, 1)  # BUG: repeat_interleave(n_rep, dim=1)
        v = self.repeat_kv(cache[1])
        att = (q @ k.transpose(-2, -1)) * self.scale()  # (B, H, n, T)
        att = att.masked_fill(self.future_mask(n, k.shape[2], past > 0), float("-inf"))
        if pad_mask is not None:
            att = att.masked_fill(self.padding_mask(pad_mask, n), float("-inf"))
        att = torch.softmax(att, dim=-1).nan_to_num(0.0)
        y = (att @ v).transpose(1, 2).reshape(b, n, -1)
        return self.wo(y), cache


adapter = mutant(BUG_CLASS, attention_entry(Attention))
