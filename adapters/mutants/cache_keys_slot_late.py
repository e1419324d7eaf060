"""A static (preallocated) KV cache whose keys are written one slot too far while its values
are written where they belong: ``cache_k[:, :, F + 1:F + n + 1] = k`` beside ``cache_v[:, :,
F:F + n] = v`` on a cache filled to F, both read over slots 0..F+n-1. Each token's own key is
never read, slot 0 holds a zero key, and each weight meets the value of the token after the
key it scored. The plain forward does not use the cache and is right (SPEC.md §11.6). One
index typed twice with one of the two edited (the pattern of a functional port's
``cache.at[...].set``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .cache_slot_late import _step
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_keys_slot_late"
EXPECTED_CODES = frozenset({"cache.causal_off_by_one"})


class Attention(gpt_tutorial.Attention):
    def extend_cache(self, cache, k: Tensor, v: Tensor):
        """``cache``: None (a plain forward, no cache) or (keys read, values read, keys
        written, values written)."""
        if cache is None:
            return k, v
        b, h, _, d = k.shape
        if len(cache) == 4:
            written_k, written_v = cache[2], cache[3]
        else:  # the empty cache of a prefill: slot 0 of the keys never written, zeros
            written_k, written_v = k.new_zeros(b, h, 1, d), v.new_zeros(b, h, 0, d)
        filled = written_v.shape[2]
        written_k = torch.cat([written_k, k], dim=2)  # BUG: slots F+1..F+n, not F..F+n-1
        written_v = torch.cat([written_v, v], dim=2)
        read = filled + k.shape[2]
        return written_k[:, :, :read], written_v[:, :, :read], written_k, written_v


adapter = mutant(BUG_CLASS, attention_entry(Attention, step=_step))
