"""A KV cache that is replaced instead of extended: each call keeps only its own keys and
values, so after the prompt every decoded token attends itself alone. (The padding mask is
cut to the keys at hand, ``pad_mask[:, -T:]``, as transformers slices its mask to the key
length; with a correct cache that cut changes nothing.) Cited: alex-hh/profam#168 ("fix kv
caching bug: past_key_values was incorrectly being set to None"),
iCog-Labs-Dev/PC-Transformers#129 (a generation loop and a cache that disagree on what the
cache holds), facebookresearch/lingua#44 (the cache updated at the wrong point).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_dropped"
EXPECTED_CODES = frozenset({"cache.ignored"})


class Attention(gpt_tutorial.Attention):
    def extend_cache(self, cache: Cache | None, k: Tensor, v: Tensor) -> Cache:
        return k, v  # BUG: the past keys and values are dropped, not concatenated

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
        k, v = self.repeat_kv(cache[0]), self.repeat_kv(cache[1])
        t = k.shape[2]
        att = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        att = att.masked_fill(self.future_mask(n, t, past > 0), float("-inf"))
        if pad_mask is not None:
            att = att.masked_fill(pad_mask[:, None, None, -t:] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1).nan_to_num(0.0)
        y = (att @ v).transpose(1, 2).reshape(b, n, -1)
        return self.wo(y), cache


adapter = mutant(BUG_CLASS, attention_entry(Attention))
