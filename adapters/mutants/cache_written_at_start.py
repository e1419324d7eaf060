"""A static (preallocated) KV cache written at its start by every call: ``cache_kv[:, :,
:seqlen] = stack([xk, xv])`` for ``cache_kv[:, :, start_pos:start_pos + seqlen]`` (tinygrad's
and llama.c-style ports), both read over slots 0..F+n-1. The cache is not extended but
rewritten from its first slot: each call overwrites the first tokens' keys and values, and
the slots it reads for its own tokens hold zeros. The prefill (F = 0) and the plain forward
are right (SPEC.md §11.6)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .cache_slot_late import _step
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_written_at_start"
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
        read = written_k.shape[2] + n  # the position after this call's tokens
        grown_k = torch.cat([written_k, k.new_zeros(b, h, n, d)], dim=2)
        grown_v = torch.cat([written_v, v.new_zeros(b, h, n, d)], dim=2)
        written_k = torch.cat([k, grown_k[:, :, n:]], dim=2)  # BUG: slots 0..n-1, not F..F+n-1
        written_v = torch.cat([v, grown_v[:, :, n:]], dim=2)
        return written_k[:, :, :read], written_v[:, :, :read], written_k, written_v


adapter = mutant(BUG_CLASS, attention_entry(Attention, step=_step))
