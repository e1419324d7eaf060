"""A model that keeps its KV cache on itself for generation (``model.past``, set by each
decoding step) and whose plain forward continues from it instead of starting a new sequence:
the cache is never reset, so a forward after generating attends the generated sequence's keys
(the "call ``reset_cache()`` before a new prompt" bug of stateful decoders)."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_not_reset"
EXPECTED_CODES = frozenset({"cache.leaks_into_forward"})


class Attention(gpt_tutorial.Attention):
    past: Cache | None = None  # the cache of the last generation, kept on the module

    def forward(self, x: Tensor, positions=None, pad_mask=None, cache=None):
        if cache is None and pad_mask is None:  # (a padded batch is a new batch: no reuse)
            cache = self.past  # BUG: a plain forward continues the last generation
        return super().forward(x, positions, pad_mask, cache)


def step(m, cache, x, key_padding=None, positions=None):
    m.past = cache  # None on a new sequence's first call
    out, m.past = m(x, positions, key_padding, cache)
    return out, m.past


adapter = mutant(BUG_CLASS, attention_entry(Attention, step=step))
