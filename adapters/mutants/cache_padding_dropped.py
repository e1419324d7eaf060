"""The padding mask dropped in cached steps: attention that masks padded keys in the full
forward (and the prefill) but takes the mask only on the no-cache path, so a decoded token of
a left-padded row attends the pad tokens' keys. Resembles decoding loops that pass
``attention_mask`` to the prefill and forget it on later calls."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_padding_dropped"
EXPECTED_CODES = frozenset({"cache.padding_dropped_in_steps"})


class Attention(gpt_tutorial.Attention):
    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        pad_mask: Tensor | None = None,
        cache: Cache | None = None,
    ) -> tuple[Tensor, Cache]:
        if cache is not None:  # BUG: the mask is read on the no-cache path only
            pad_mask = None
        return super().forward(x, positions, pad_mask, cache)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
