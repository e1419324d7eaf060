"""A static (preallocated) KV cache whose write position advances by one slot per call
instead of by the call's number of tokens (torchtune's ``cache_pos.add_(1)`` for
``add_(seq_len)``): call k writes its keys and values at slots k..k+n-1 and the step reads
slots 0..F+n-1 of a cache that has seen F tokens. Right for one token per call after a
one-token prompt; after a prompt or a chunk of several tokens the next calls overwrite its
entries and the slots read past them hold zeros (SPEC.md §11.6, §11.9). The plain forward
does not use the cache and is right. Resembles tenstorrent/tt-metal#33883 (a chunked
prefill's start position that left out the tokens already cached)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .cache_slot_late import _step
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_write_position_per_call"
EXPECTED_CODES = frozenset({"cache.slots_overlap"})


class Attention(gpt_tutorial.Attention):
    def extend_cache(self, cache, k: Tensor, v: Tensor):
        """``cache``: None (a plain forward, no cache) or (keys read, values read, keys
        written, values written, write position), the written ones holding every slot."""
        if cache is None:
            return k, v
        b, h, n, d = k.shape
        filled = cache[0].shape[2]  # tokens seen so far
        if len(cache) == 5:
            written_k, written_v, at = cache[2], cache[3], cache[4]
        else:  # the empty cache of a prefill
            written_k, written_v, at = k.new_zeros(b, h, 0, d), v.new_zeros(b, h, 0, d), 0
        size = max(written_k.shape[2], at + n, filled + n)
        written_k = torch.cat([written_k, k.new_zeros(b, h, size - written_k.shape[2], d)], 2)
        written_v = torch.cat([written_v, v.new_zeros(b, h, size - written_v.shape[2], d)], 2)
        written_k[:, :, at : at + n], written_v[:, :, at : at + n] = k, v
        read = filled + n
        # BUG: the write position advances by one per call, not by the n tokens written
        return written_k[:, :, :read], written_v[:, :, :read], written_k, written_v, at + 1


adapter = mutant(BUG_CLASS, attention_entry(Attention, step=_step))
