"""RoPE turned the other way on the queries alone: the queries are rotated by -theta, the
keys by +theta (Meta's ``apply_rotary_emb`` with ``xq_ * freqs_cis.conj()`` for the queries,
a sign flipped in one of two copied lines). A score q_i . k_j then depends on i + j, not on
i - j: the encoding is no longer relative (SPEC.md §2.3, §2.4). Rotating both the other way is
``rope_rotation_inverted``'s class; rotating one side only, ``rope_q_only``'s."""

from __future__ import annotations

from torch import Tensor

from . import rope_q_only
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "rope_queries_turned_back"
EXPECTED_CODES = frozenset({"rope.rotation_inverted"})


class Attention(rope_q_only.Attention):
    rotated = ("q", "k")  # rotated in that order by rope_q_only's forward

    def forward(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.queries_next = True
        return super().forward(*args, **kwargs)

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """The queries (the first call of a forward) at -positions, the keys as the spec."""
        turn = -1 if self.queries_next else 1  # BUG: the queries' turn is +1
        self.queries_next = False
        return super().rotate(x, turn * positions)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
