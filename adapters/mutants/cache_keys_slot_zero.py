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
    at_start: tuple[str, ...] = ("keys",)  # the tensors written at slot 0 (the rest appended)

    def extend_cache(self, cache, k: Tensor, v: Tensor):
        """``cache``: None (a plain forward, no cache) or (keys read, values read, keys
        written, values written), the written ones holding every slot from 0."""
        if cache is None:
            return k, v
        b, h, n, d = k.shape
        if len(cache) == 4:
            written = {"keys": cache[2], "values": cache[3]}
        else:  # the empty cache of a prefill
            written = {"keys": k.new_zeros(b, h, 0, d), "values": v.new_zeros(b, h, 0, d)}
        read = written["keys"].shape[2] + n  # the slots after this call's tokens
        for name, new in (("keys", k), ("values", v)):
            if name in self.at_start:  # BUG: slots 0..n-1, not F..F+n-1
                grown = torch.cat([written[name], new.new_zeros(b, h, n, d)], dim=2)
                written[name] = torch.cat([new, grown[:, :, n:]], dim=2)
            else:
                written[name] = torch.cat([written[name], new], dim=2)
        keys, values = written["keys"], written["values"]
        return keys[:, :, :read], values[:, :, :read], keys, values


adapter = mutant(BUG_CLASS, attention_entry(Attention, step=_step))
