"""A GPT-2-style causal LM that reads its learned position table one row late,
``wpe(positions + 1)``, as a port from a model whose positions start after a padding index
(fairseq counts from padding_idx + 1) would. The model numbers its tokens itself when no
position ids are given (SPEC.md §2.2, §11.9)."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "lm_positions_off_by_one"
EXPECTED_CODES = frozenset({"positional.position_offset"})


class GPT(gpt_tutorial.GPT):
    def forward(self, idx, pad_mask=None, positions=None, caches=None):  # type: ignore[no-untyped-def]
        b, n = idx.shape
        past = 0 if caches is None else caches[0][0].shape[2]
        if positions is None:
            positions = self.positions_from(pad_mask, b, n, past)
        x = self.wte(idx) + self.wpe(
            (positions + 1).clamp(max=self.wpe.num_embeddings - 1)
        )  # BUG: positions
        new = []
        for i, block in enumerate(self.h):
            x, cache = block(x, positions, pad_mask, None if caches is None else caches[i])
            new.append(cache)
        logits: Tensor = self.ln_f(x) @ self.wte.weight.T
        return logits, new


adapter = mutant(BUG_CLASS, gpt_entry(GPT))
