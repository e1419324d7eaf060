"""RoPE applied to the values as well as to the queries and keys (a loop over
``(q, k, v)`` where it should run over ``(q, k)``): the attention output is a mix of rotated
values, no longer a mix of the values. Same class as ``rope_q_only``.
"""

from __future__ import annotations

from . import rope_q_only
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "rope_on_values"
EXPECTED_CODES = frozenset({"rope.applied_to_wrong_tensors"})


class Attention(rope_q_only.Attention):
    rotated = ("q", "k", "v")  # BUG: v rotated too


adapter = mutant(BUG_CLASS, attention_entry(Attention))
