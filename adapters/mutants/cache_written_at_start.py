"""A static (preallocated) KV cache written at its start by every call: ``cache_kv[:, :,
:seqlen] = stack([xk, xv])`` for ``cache_kv[:, :, start_pos:start_pos + seqlen]`` (tinygrad's
and llama.c-style ports), both read over slots 0..F+n-1. The cache is not extended but
rewritten from its first slot: each call overwrites the first tokens' keys and values, and
the slots it reads for its own tokens hold zeros. The prefill (F = 0) and the plain forward
are right (SPEC.md §11.6)."""

from __future__ import annotations

from . import cache_keys_slot_zero
from .cache_slot_late import _step
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_written_at_start"
EXPECTED_CODES = frozenset({"cache.ignored"})


class Attention(cache_keys_slot_zero.Attention):
    at_start = ("keys", "values")  # BUG: both written at slot 0 by every call


adapter = mutant(BUG_CLASS, attention_entry(Attention, step=_step))
