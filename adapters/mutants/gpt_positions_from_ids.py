"""A GPT whose learned position table is indexed by the token ids: ``wpe(idx)`` for
``wpe(positions)``, a one-word slip beside ``wte(idx)``. Every token gets the position row of
its own id, so the output depends on which tokens are present, not on where they stand: the
positions given never reach the table (SPEC.md §2.5, §11.5)."""

from __future__ import annotations

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "gpt_positions_from_ids"
EXPECTED_CODES = frozenset({"positional.positions_ignored"})


class GPT(gpt_tutorial.GPT):
    def forward(self, idx, pad_mask=None, positions=None, caches=None):  # type: ignore[no-untyped-def]
        b, n = idx.shape
        past = 0 if caches is None else caches[0][0].shape[2]
        if positions is None:
            positions = self.positions_from(pad_mask, b, n, past)
        x = self.wte(idx) + self.wpe(idx)  # BUG: self.wpe(positions)
        new = []
        for i, block in enumerate(self.h):
            x, cache = block(x, positions, pad_mask, None if caches is None else caches[i])
            new.append(cache)
        return self.logits(self.ln_f(x)), new


adapter = mutant(BUG_CLASS, gpt_entry(GPT))
