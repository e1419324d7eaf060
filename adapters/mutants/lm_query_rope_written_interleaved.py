"""A Llama-style attention that rotates its queries and keys with ``rotate_half`` (pairs
(i, i + d/2)) and writes the queries' rotated halves back interleaved,
``torch.stack((first, second), -1).flatten(-2)`` where ``torch.cat((first, second), -1)``
belongs, while the keys keep the declared layout (Meta's llama ``apply_rotary_emb`` edited on
one side only): every pair turns by the right angle, but the queries' channels no longer
line up with the keys' in the scores (SPEC.md §2.3)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry, llama_block_entry
from .tutorial import mutant

BUG_CLASS = "lm_query_rope_written_interleaved"
EXPECTED_CODES = frozenset({"rope.table_layout_mismatch"})


class Attention(gpt_tutorial.Attention):
    def rotate_queries(self, q: Tensor, positions: Tensor) -> Tensor:
        rotated = self.rotate(q, positions)
        first, second = rotated.chunk(2, dim=-1)
        return torch.stack((first, second), dim=-1).flatten(-2)  # BUG: torch.cat(..., dim=-1)


class Block(gpt_tutorial.Block):
    attention = Attention


adapter = mutant(BUG_CLASS, attention_entry(Attention), llama_block_entry(Block))
