"""A rotary cache keyed by sequence length only: cos/sin computed for the first call's
positions are reused for any later call of the same length, whatever its positions. Cited:
lucidrains/rotary-embedding-torch#11 ("Bug in cache": the offset "is not being cached. So if
I pass the same t with different offsets I get the same result as in first offset"; the key
should include the offset).
"""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mutant, rope_entry

BUG_CLASS = "rope_cache_key"
EXPECTED_CODES = frozenset({"state.leaks_between_calls"})


class RotaryEmbedding(tutorial.RotaryEmbedding):
    def __init__(self, dim: int, base: float = 10000.0):
        super().__init__(dim, base)
        self._cache: dict[str, Tensor] = {}

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        key = f"freqs:{positions.numel()}"  # BUG: the positions themselves are not in the key
        if key not in self._cache:
            self._cache[key] = positions.clone()
        return super().forward(x, self._cache[key])


adapter = mutant(BUG_CLASS, rope_entry(RotaryEmbedding))
