"""RoPE offset by the cache for the queries only: a cached step rotates its queries at their
position ids but its keys at their index within the call (from 0), as when the offset is
added on one of the two paths (the key rotation written before the position ids are shifted
by the cache's length). Keys of the prefill are right; a decoded token's own key is not."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_rope_keys_offset"
EXPECTED_CODES = frozenset({"cache.rope_offset_wrong"})


class Attention(gpt_tutorial.Attention):
    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        pad_mask: Tensor | None = None,
        cache: Cache | None = None,
    ) -> tuple[Tensor, Cache]:
        self.past = 0 if cache is None else cache[0].shape[2]  # cached keys before this call
        self.rotated = 0
        return super().forward(x, positions, pad_mask, cache)

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        self.rotated += 1  # forward rotates the queries, then the keys
        if self.rotated == 2 and self.past:  # BUG: a step's keys numbered within the call
            positions = self.default_positions(positions.shape[0], positions.shape[1], 0)
        return super().rotate(x, positions)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
