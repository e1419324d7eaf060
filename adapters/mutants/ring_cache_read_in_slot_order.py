"""A ring cache read back in slot order instead of token order: once the ring has wrapped
(token t at slot ``t % size``), its oldest token no longer sits in slot 0, so the step's
mask, which numbers the keys it reads oldest first, falls on other tokens: a decoded token
sees a key older than its window and misses one inside it (SPEC.md §11.6, §4.5). Right
until the ring wraps, and in the full forward. Resembles tenstorrent/tt-metal#54935 (a ring
cache read linearly, as a full-length cache is laid out, once it has wrapped)."""

from __future__ import annotations

import torch
from torch import Tensor

from .ring_cache import RingAttention, ring_entry
from .tutorial import mutant

BUG_CLASS = "ring_cache_read_in_slot_order"
EXPECTED_CODES = frozenset({"cache.read_order_wrong"})


class Attention(RingAttention):
    def read_slots(self, token: Tensor) -> Tensor:
        return torch.nonzero(token >= 0).flatten()  # BUG: slot order, not token order


adapter = mutant(BUG_CLASS, ring_entry(Attention))
