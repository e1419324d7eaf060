"""A ring cache that reads the key-padding mask by each key's place in the attended list
(``pad_mask[:, :T]``) instead of at the token the key belongs to: once the ring has dropped
old tokens, the mask falls on the wrong keys, so a left-padded row's decoded tokens lose real
keys (and may see pads) while rows without padding decode right (SPEC.md §11.6, §11.7)."""

from __future__ import annotations

from torch import Tensor

from .ring_cache import RingAttention, ring_entry
from .tutorial import mutant

BUG_CLASS = "ring_cache_padding_by_place"
EXPECTED_CODES = frozenset({"cache.padding_misaligned"})


class Attention(RingAttention):
    def key_padding(self, pad_mask: Tensor, key_token: Tensor) -> Tensor:
        # BUG: the first len(key_token) entries of the mask, not the keys' own tokens
        return pad_mask[:, : len(key_token)][:, None, None, :] == 0


adapter = mutant(BUG_CLASS, ring_entry(Attention))
