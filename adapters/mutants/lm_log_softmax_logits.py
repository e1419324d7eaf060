"""A GPT-2 causal LM that returns ``log_softmax(logits)``: the normalisation that belongs to
the loss (or to sampling) moved into the forward, so every row's exp sums to one and the
logits' offsets are gone (SPEC.md §8.2).
"""

from __future__ import annotations

import torch

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "lm_log_softmax_logits"
EXPECTED_CODES = frozenset({"model.returns_log_probabilities"})


class GPT(gpt_tutorial.GPT):
    def forward(self, idx, pad_mask=None, positions=None, caches=None):  # type: ignore[no-untyped-def]
        logits, new = super().forward(idx, pad_mask, positions, caches)
        return torch.log_softmax(logits, dim=-1), new  # BUG: logits are the spec's output


adapter = mutant(BUG_CLASS, gpt_entry(GPT))
