"""A static KV cache of ``max_len`` slots that returns its whole buffer: ``return
self.keys, self.values`` for ``self.keys[:, :, :offset], ...``. A call of several tokens
builds its causal mask over the written slots and masks the rest; a call of one token
takes no mask (nothing after it to hide), so it also attends every unwritten slot, zero keys
and values that take a share of the softmax. The plain forward uses no cache and is right
(SPEC.md §11.6).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_whole_buffer_read"
EXPECTED_CODES = frozenset({"cache.unwritten_slots_read"})


class Attention(gpt_tutorial.Attention):
    def forward(self, x: Tensor, positions=None, pad_mask=None, cache=None):  # type: ignore[no-untyped-def]
        if cache is None:  # the plain forward: no cache
            return super().forward(x, positions, pad_mask, None)
        keys, values, past = cache
        b, n, _ = x.shape
        if positions is None:
            positions = self.default_positions(b, n, past)
        q = self.wq(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = self.rotate(q, positions), self.rotate(k, positions)
        filled = past + n
        keys = torch.cat([keys[:, :, :past], k, keys[:, :, filled:]], dim=2)
        values = torch.cat([values[:, :, :past], v, values[:, :, filled:]], dim=2)
        kk, vv = self.repeat_kv(keys), self.repeat_kv(values)  # BUG: [:, :, :filled] missing
        att = (q @ kk.transpose(-2, -1)) * self.scale()  # (B, H, n, capacity)
        hidden = torch.zeros(n, keys.shape[2], dtype=torch.bool)
        if n > 1:  # the causal mask over the written slots; the unwritten ones hidden
            hidden[:, :filled] = self.future_mask(n, filled, past > 0)
            hidden[:, filled:] = True
        if pad_mask is not None:
            pads = torch.zeros(b, 1, 1, keys.shape[2], dtype=torch.bool)
            pads[..., :filled] = self.padding_mask(pad_mask, n)
            hidden = hidden | pads
        att = att.masked_fill(hidden, float("-inf"))
        y = (self.weights(att) @ vv).transpose(1, 2).reshape(b, n, -1)
        return self.wo(y), (keys, values, filled)


def _step(m, cache, x, key_padding=None, positions=None):  # type: ignore[no-untyped-def]
    if cache is None:  # a buffer of max_len zero slots, allocated before the prefill
        shape = (x.shape[0], m.n_kv_heads, m.capacity, m.head_dim)
        cache = (x.new_zeros(shape), x.new_zeros(shape), 0)
    return m(x, positions, key_padding, cache)


def _with_capacity(make):  # type: ignore[no-untyped-def]
    def build(c):  # type: ignore[no-untyped-def]
        module = make(c)
        module.capacity = c.max_len  # the buffer's slots, allocated once
        return module

    return build


_entry = attention_entry(Attention, step=_step)
adapter = mutant(BUG_CLASS, dataclasses.replace(_entry, make=_with_capacity(_entry.make)))
