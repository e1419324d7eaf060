"""A static (preallocated) KV cache whose keys are written at the cache's start by every call
while its values are written where they belong: ``cache_k[:, :, 0:n] = k`` beside
``cache_v[:, :, F:F + n] = v`` on a cache filled to F, both read over slots 0..F+n-1 (the
write index of a C-style port's ``key_cache + loff + pos * kv_dim`` left without its
``pos``). Each call overwrites the first keys, its own tokens' key slots hold zeros, and the
weights of the first slots meet values their keys never scored. The prefill (F = 0) and the
plain forward are right (SPEC.md §11.6).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .cache_slot_late import _step
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_keys_slot_zero"
EXPECTED_CODES = frozenset({"cache.ignored"})


class Attention(gpt_tutorial.Attention):
    def extend_cache(self, cache, k: Tensor, v: Tensor):
        """``cache``: None (a plain forward, no cache) or (keys read, values read, keys
        written, values written), the written ones holding every slot from 0."""
        if cache is None:
            return k, v
        b, h, n, d = k.shape
        if len(cache) == 4:
            written_k, written_v = cache[2], cache[3]
        else:  # the empty cache of a prefill
            written_k, written_v = k.new_zeros(b, h, 0, d), v.new_zeros(b, h, 0, d)
        filled = written_v.shape[2]
        grown = torch.cat([written_k, k.new_zeros(b, h, n, d)], dim=2)
        written_k = torch.cat([k, grown[:, :, n:]], dim=2)  # BUG: slots 0..n-1, not F..F+n-1
        written_v = torch.cat([written_v, v], dim=2)
        read = filled + n
        return written_k[:, :, :read], written_v[:, :, :read], written_k, written_v


adapter = mutant(BUG_CLASS, attention_entry(Attention, step=_step))
