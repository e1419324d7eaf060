"""A KV cache that each call replaces by its own keys and values: the call attends the
cache it was given and its new tokens (``torch.cat([past, new])``), but returns only the new
ones as the cache (``present = (k, v)`` taken before the concatenation instead of after,
a port of transformers' GPTBigCode can write when it mixes up ``layer_past`` and
``present``). Each decoded token then sees its own call and the call before it; every
earlier call is forgotten (SPEC.md §11.6). One-token steps after a one-token prompt are
no exception: each sees the token before it and itself."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_replaced_by_call"
EXPECTED_CODES = frozenset({"cache.ignored"})


class Attention(gpt_tutorial.Attention):
    def forward(self, x: Tensor, positions=None, pad_mask=None, cache=None):  # type: ignore[no-untyped-def]
        out, full = super().forward(x, positions, pad_mask, cache)
        n = x.shape[1]
        return out, (full[0][:, :, -n:], full[1][:, :, -n:])  # BUG: this call's keys only


adapter = mutant(BUG_CLASS, attention_entry(Attention))
