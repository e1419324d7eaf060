"""A static (preallocated) KV cache written one slot too far: a call of n tokens on a cache
filled to F writes its keys and values at slots F+1..F+n and reads slots 0..F+n-1
(``index_copy_(2, arange(F + 1, F + n + 1), k)`` for ``arange(F, F + n)``). Every cached
token then misses its own key and attends slot 0, never written, a zero key and a zero value
that still take a share of the softmax. The plain forward does not use the cache and is
right (SPEC.md §11.6). Resembles huggingface/candle#1517 (a cache indexed one position
off)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_slot_late"
EXPECTED_CODES = frozenset({"cache.causal_off_by_one"})


class Attention(gpt_tutorial.Attention):
    def extend_cache(self, cache, k: Tensor, v: Tensor):
        """``cache``: None (a plain forward, no cache) or (keys read, values read, keys
        written, values written), the written ones holding every slot from 0."""
        if cache is None:
            return k, v
        b, h, _, d = k.shape
        if len(cache) == 4:
            written_k, written_v = cache[2], cache[3]
        else:  # the empty cache of a prefill: nothing written yet
            written_k, written_v = k.new_zeros(b, h, 0, d), v.new_zeros(b, h, 0, d)
        filled = written_k.shape[2] - (1 if len(cache) == 4 else 0)
        if filled == 0:  # slot 0 exists, never written: zeros
            written_k = torch.cat([written_k, k.new_zeros(b, h, 1, d)], dim=2)
            written_v = torch.cat([written_v, v.new_zeros(b, h, 1, d)], dim=2)
        written_k = torch.cat([written_k, k], dim=2)  # BUG: slots F+1..F+n, not F..F+n-1
        written_v = torch.cat([written_v, v], dim=2)
        read = filled + k.shape[2]
        return written_k[:, :, :read], written_v[:, :, :read], written_k, written_v


def _step(m, cache, x, key_padding=None, positions=None):
    if cache is None:  # the prefill runs on an empty static cache
        empty = x.new_zeros(x.shape[0], m.n_kv_heads, 0, m.head_dim)
        cache = (empty, empty)
    out, cache = m(x, positions, key_padding, cache)
    return out, cache


adapter = mutant(BUG_CLASS, attention_entry(Attention, step=_step))
