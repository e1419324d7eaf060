"""A causal-mask buffer kept between calls: grown to the longest sequence seen and sliced as
``mask[:n, -t:]`` (the top rows, the last columns), which is the causal triangle only while
the buffer is exactly as long as the call. Every call is right on a fresh instance, and on a
reused one until a longer call has grown the buffer: then a shorter call's queries see no
key at all (SPEC.md §10.1). Adapted without a padding mask, as many decoder-only examples
are, so the reuse checks that need padded inputs do not reach it."""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "causal_cache_held"
EXPECTED_CODES = frozenset({"state.leaks_between_calls"})


class Attention(gpt_tutorial.Attention):
    buffer: Tensor | None = None  # True above the diagonal: keys a query must not see

    def future_mask(self, n: int, t: int, cached: bool) -> Tensor:
        if self.buffer is None or self.buffer.shape[0] < t:
            self.buffer = torch.ones(t, t, dtype=torch.bool).triu(diagonal=1)
        return self.buffer[:n, -t:]  # BUG: right only while the buffer is t long


def forward(m, x, positions=None):  # no padding mask: the subject takes unpadded calls only
    return m(x, positions)[0]


adapter = mutant(
    BUG_CLASS, dataclasses.replace(attention_entry(Attention), forward=forward, step=None)
)
