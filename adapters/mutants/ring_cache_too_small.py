"""A ring cache one slot too small for its sliding window: the ring keeps ``window - 2``
tokens between calls, so a decoded token sees its own key and ``window - 2`` earlier ones,
not ``window - 1`` (SPEC.md §4.5, §11.6). The full forward is right; only cached steps see the
narrower window. Resembles huggingface/transformers#47708 (a rolling sliding-window cache
keeping one key too few) in a preallocated ring instead of a rolling buffer."""

from __future__ import annotations

from .ring_cache import RingAttention, ring_entry
from .tutorial import mutant

BUG_CLASS = "ring_cache_too_small"
EXPECTED_CODES = frozenset({"mask.sliding_window_wrong"})


class Attention(RingAttention):
    def ring_size(self) -> int:
        return self.window - 2  # BUG: window - 1 slots are needed besides the query's own key


adapter = mutant(BUG_CLASS, ring_entry(Attention))
