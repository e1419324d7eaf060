"""A sliding-window decoder whose cached steps number the causal triangle from the call's own
tokens while the window's lower edge stays offset by the cache: ``tril(ones(n, T),
diagonal=0)`` where ``diagonal=T - n`` belongs, beside a correct ``triu(..., diagonal=T - n -
w + 1)``. The prefill on an empty cache is right; in a later call query i sees keys 0..i
below and keys above its place minus w: once the cache holds w keys the two bands no longer
meet and the query sees no key (SPEC.md §4.3, §4.5, §11.6). Mistral's reference
``model.py`` builds its mask with ``torch.tril(..., diagonal=0)`` then ``torch.triu(...,
diagonal=-sliding_window)`` and was fixed to offset both by the cache (mistralai/mistral-src,
the ``start_pos`` offsets of its first releases); a port that offsets only one gives this.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "sliding_window_cache_top_left"
EXPECTED_CODES = frozenset({"cache.causal_top_left"})
WINDOW = 3  # what the model declares: each query sees its last 3 keys, its own included


class Attention(gpt_tutorial.Attention):
    def __init__(self, *args: Any, sliding_window: int = WINDOW, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.sliding_window = sliding_window

    def future_mask(self, n: int, t: int, cached: bool) -> Tensor:
        key = torch.arange(t)[None, :]
        place = torch.arange(t - n, t)[:, None]  # each query's index among the keys
        own = torch.arange(n)[:, None]  # BUG: the causal edge numbered within the call
        return (key > own) | (key <= place - self.sliding_window)


_ENTRY = attention_entry(Attention)
adapter = mutant(
    BUG_CLASS,
    dataclasses.replace(
        _ENTRY, conventions=dataclasses.replace(_ENTRY.conventions, sliding_window=WINDOW)
    ),
)
