"""A GPT-2-style causal LM whose learned position table is stored behind two extra rows, as
transformers' OPT stores it (``OPTLearnedPositionalEmbedding``, offset 2), and is indexed
without the offset: ``F.embedding(positions, table)`` for ``positions + 2``. Position p gets
the row of p - 2, the first two positions the extra rows (zeros here) (SPEC.md §2.2)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "lm_positions_read_early"
EXPECTED_CODES = frozenset({"positional.position_offset"})
OFFSET = 2


class GPT(gpt_tutorial.GPT):
    def forward(self, idx, pad_mask=None, positions=None, caches=None):  # type: ignore[no-untyped-def]
        b, n = idx.shape
        past = 0 if caches is None else caches[0][0].shape[2]
        if positions is None:
            positions = self.positions_from(pad_mask, b, n, past)
        table = self.wpe.weight
        stored = torch.cat([table.new_zeros(OFFSET, table.shape[1]), table])  # OPT's layout
        x = self.wte(idx) + stored[positions]  # BUG: stored[positions + OFFSET]
        new = []
        for i, block in enumerate(self.h):
            x, cache = block(x, positions, pad_mask, None if caches is None else caches[i])
            new.append(cache)
        logits: Tensor = self.ln_f(x) @ self.wte.weight.T
        return logits, new


adapter = mutant(BUG_CLASS, gpt_entry(GPT))
