"""Causal self-attention laying its key-padding mask over the queries:
``pad_mask[:, None, :, None]`` for ``pad_mask[:, None, None, :]``. Under right padding the
causal mask hides the difference (the real queries never reach the pads); under left padding
the real tokens attend the pads and the pad rows have no key. A cached step lays the mask of
its own n tokens over its queries, ``pad_mask[:, None, -n:, None]`` (SPEC.md §4.2, §11.7)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "causal_padding_on_queries"
EXPECTED_CODES = frozenset({"mask.applied_to_queries"})


class Attention(gpt_tutorial.Attention):
    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        pad_mask: Tensor | None = None,  # (B, T): 1 = token, 0 = padding
        cache: gpt_tutorial.Cache | None = None,
    ) -> tuple[Tensor, gpt_tutorial.Cache]:
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
        att = (q @ k.transpose(-2, -1)) * self.scale()  # (B, H, n, T)
        att = att.masked_fill(self.future_mask(n, k.shape[2], past > 0), float("-inf"))
        if pad_mask is not None:
            att = att.masked_fill(pad_mask[:, None, -n:, None] == 0, float("-inf"))  # BUG: keys
        att = torch.softmax(att, dim=-1).nan_to_num(0.0)  # a row with no key: zeros
        y = (att @ v).transpose(1, 2).reshape(b, n, -1)
        return self.wo(y), cache


adapter = mutant(BUG_CLASS, attention_entry(Attention))
