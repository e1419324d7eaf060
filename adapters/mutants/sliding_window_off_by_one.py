"""A sliding window one key too wide: the model declares Mistral's ``sliding_window`` w, and
the mask keeps keys i - w .. i (w + 1 of them) instead of i - w + 1 .. i (SPEC.md §4.5), as
flash-attn's inclusive ``window_size=(w, 0)`` does when handed the config's w unchanged.
Cited: huggingface/transformers#39408 ("Off-by-one error when using flash_attention with a
sliding window"), huggingface/transformers#29623 (eager and Flash Attention 2 windows of
different widths), zml/zml#763 ("window_size_left is inclusive of the current position, so it
is minus 1 compared to the actual sliding_window size"). Sequences no longer than w agree
with the spec; the checks' longer ones do not.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "sliding_window_off_by_one"
EXPECTED_CODES = frozenset({"mask.sliding_window_wrong"})
WINDOW = 4  # what the model declares: each query sees its last 4 keys, its own included


class Attention(gpt_tutorial.Attention):
    def __init__(self, *args: Any, sliding_window: int = WINDOW, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.sliding_window = sliding_window

    def future_mask(self, n: int, t: int, cached: bool) -> Tensor:
        hidden = super().future_mask(n, t, cached)  # keys after each query
        query = torch.arange(t - n, t)[:, None]  # (n, 1): each query's index among the keys
        key = torch.arange(t)[None, :]
        # BUG: window_size=(w, 0) is inclusive: hides keys before i - w, not up to i - w
        return hidden | (key < query - self.sliding_window)


_ENTRY = attention_entry(Attention)
adapter = mutant(
    BUG_CLASS,
    dataclasses.replace(
        _ENTRY, conventions=dataclasses.replace(_ENTRY.conventions, sliding_window=WINDOW)
    ),
)
