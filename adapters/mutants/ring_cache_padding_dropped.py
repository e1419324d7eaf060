"""A ring cache that masks padded keys in the full forward only: once the ring holds tokens,
the step attends every key in the window, pads included (SPEC.md §11.6, §11.7). Unlike
``cache_padding_dropped`` (an unbounded cache), the pads are seen only while they are in the
ring and in the window."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from .ring_cache import RingAttention, ring_entry
from .tutorial import mutant

BUG_CLASS = "ring_cache_padding_dropped"
EXPECTED_CODES = frozenset({"cache.padding_dropped_in_steps"})


class Attention(RingAttention):
    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        pad_mask: Tensor | None = None,
        cache: dict[str, Any] | None = None,
    ) -> tuple[Tensor, dict[str, Any]]:
        if cache is not None:  # BUG: the mask reaches the first call only
            pad_mask = None
        return super().forward(x, positions, pad_mask, cache)


adapter = mutant(BUG_CLASS, ring_entry(Attention))
