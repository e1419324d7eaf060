"""Causal self-attention on ``nn.MultiheadAttention`` whose guard for rows with no key (the
module returns NaN there) tests ``any`` where it should test ``all``: every query row with
some key hidden, a key after it or a pad, is zeroed after the output projection. With a
padding mask nearly every row of the batch comes out 0; without one the guard does not run
(SPEC.md §4.4, §4.1)."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import module_attention_entry
from .tutorial import mutant

BUG_CLASS = "lm_partial_rows_zeroed"
EXPECTED_CODES = frozenset({"mask.partial_rows_zeroed"})


class Attention(gpt_tutorial.ModuleAttention):
    def keyless(self, hidden: Tensor) -> Tensor:
        return hidden.any(dim=-1)  # BUG: all (a row with no key left)


adapter = mutant(BUG_CLASS, module_attention_entry(Attention))
