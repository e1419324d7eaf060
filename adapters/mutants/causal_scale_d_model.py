"""Causal self-attention scaled by 1/sqrt(d_model) instead of 1/sqrt(d_k): the scores of a
decoder are too flat by sqrt(n_heads). The attention-scale probes run on ``attention`` and
``mha``; this decoder exposes only ``causal_self_attention``, so the oracle comparison must
name the scale itself. The ``scale_d_model`` mutant's bug (the embedding width where the
head width belongs), in a decoder.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "causal_scale_d_model"
EXPECTED_CODES = frozenset({"attention.scale_wrong"})


class Attention(gpt_tutorial.Attention):
    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        pad_mask: Tensor | None = None,
        cache: Cache | None = None,
    ) -> tuple[Tensor, Cache]:
        b, n, width = x.shape
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
        att = q @ k.transpose(-2, -1) / math.sqrt(width)  # BUG: d_model, not head_dim
        att = att.masked_fill(self.future_mask(n, k.shape[2], past > 0), float("-inf"))
        if pad_mask is not None:
            att = att.masked_fill(pad_mask[:, None, None, :] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1).nan_to_num(0.0)
        y = (att @ v).transpose(1, 2).reshape(b, n, -1)
        return self.wo(y), cache


adapter = mutant(BUG_CLASS, attention_entry(Attention))
