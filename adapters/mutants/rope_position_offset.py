"""RoPE one position ahead: the rotation for the token at position p uses p + 1, as in a
decoding loop that sets the next token's position to ``prefix + step + 1``. Cited:
Physical-Intelligence/openpi#705 ("potential bug in setting positions value for new token
during decoding": ``+ step + 1`` where ``+ step`` was meant), skyzh/tiny-llm#46 (an offset
advanced by the wrong amount, which "is problematic when KV cache or rotary position
encoding depends on accurate token indices").
"""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mutant, rope_entry

BUG_CLASS = "rope_position_offset"
EXPECTED_CODES = frozenset({"rope.position_offset"})


class RotaryEmbedding(tutorial.RotaryEmbedding):
    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        return super().forward(x, positions + 1)  # BUG: one step ahead


adapter = mutant(BUG_CLASS, rope_entry(RotaryEmbedding))
