"""A static KV cache held by the module, as Meta's ``llama`` reference holds ``cache_k`` and
``cache_v``: one preallocated buffer that the plain forward writes too, each call writing at
its start position and reading slots 0..F+n-1. Here the keys are written at the buffer's
start by every call (``cache_k[:bsz, :seqlen] = xk`` for ``cache_k[:bsz, start_pos :
start_pos + seqlen]``), the values where they belong. A step overwrites the first keys, and
the key slots it reads past its own still hold what the last full call wrote there: the
full forward of the same sequence, the kit's first call, leaves the right keys in them
(SPEC.md §11.6)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .cache_slot_late import _step
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_module_buffer_keys_at_start"
EXPECTED_CODES = frozenset({"cache.ignored"})
SLOTS = 64  # the buffer's length, grown (zeros appended) for a longer call


class Attention(gpt_tutorial.Attention):
    def buffers_for(self, k: Tensor, slots: int) -> tuple[Tensor, Tensor]:
        """The module's two buffers (B, H_kv, >= slots, hd), made anew for another batch
        size, dtype or device (a model rebuilt for another max_batch_size), grown with zero
        slots where a call needs more."""
        b, h, _, d = k.shape
        held = getattr(self, "held", None)
        if held is None or held[0].shape[:2] != (b, h) or held[0].dtype != k.dtype:
            held = (k.new_zeros(b, h, SLOTS, d), k.new_zeros(b, h, SLOTS, d))
        if held[0].shape[2] < slots:
            more = k.new_zeros(b, h, slots - held[0].shape[2], d)
            held = (torch.cat([held[0], more], 2), torch.cat([held[1], more], 2))
        self.held = held
        return held

    def extend_cache(self, cache, k: Tensor, v: Tensor):
        filled = 0 if cache is None else cache[0].shape[2]
        n = k.shape[2]
        keys, values = self.buffers_for(k, filled + n)
        keys[:, :, :n] = k.detach()  # BUG: keys[:, :, filled:filled + n]
        values[:, :, filled : filled + n] = v.detach()
        if cache is None:  # the plain forward computes with its own tensors
            return k, v
        return keys[:, :, : filled + n], values[:, :, : filled + n]


adapter = mutant(BUG_CLASS, attention_entry(Attention, step=_step))
