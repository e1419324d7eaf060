"""A GPT-2-style causal LM that loads its learned position table and never adds it:
``x = wte(idx)`` for ``wte(idx) + wpe(positions)``. Every token carries no position at all,
only the causal mask orders them (SPEC.md §2.2). On a call of one token the output is what a
RoPE model (a rotation by 0) gives: the smaller change, the table left out, is named."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "lm_position_table_not_added"
EXPECTED_CODES = frozenset({"positional.positions_ignored"})


class GPT(gpt_tutorial.GPT):
    def forward(self, idx, pad_mask=None, positions=None, caches=None):  # type: ignore[no-untyped-def]
        b, n = idx.shape
        past = 0 if caches is None else caches[0][0].shape[2]
        if positions is None:
            positions = self.positions_from(pad_mask, b, n, past)
        x = self.wte(idx)  # BUG: + self.wpe(positions)
        new = []
        for i, block in enumerate(self.h):
            x, cache = block(x, positions, pad_mask, None if caches is None else caches[i])
            new.append(cache)
        logits: Tensor = self.ln_f(x) @ self.wte.weight.T
        return logits, new


adapter = mutant(BUG_CLASS, gpt_entry(GPT))
