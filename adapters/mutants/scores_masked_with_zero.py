"""Causal self-attention whose hidden scores (future keys, padding) are set to 0 instead of
-inf, ``att.masked_fill(hidden, 0.0)``: a fill meant for the weights after the softmax put on
the scores, so every masked key keeps the weight of a zero score (SPEC.md §4.1, §4.3). Public
reports of the class: awslabs/gluonts#1401 and Shujun-He/RibonanzaNet#5 (masked scores filled
with 1e-9 and -1e-9, "basically 0", which masks nothing)."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry, llama_block_entry
from .tutorial import mutant

BUG_CLASS = "scores_masked_with_zero"
EXPECTED_CODES = frozenset({"mask.added_as_bias"})


class Attention(gpt_tutorial.Attention):
    def masked(self, scores: Tensor, n: int, cached: bool, pad_mask: Tensor | None) -> Tensor:
        hidden = self.hidden(n, scores.shape[-1], cached, pad_mask)
        return scores.masked_fill(hidden, 0.0)  # BUG: -inf


class Block(gpt_tutorial.Block):
    attention = Attention


adapter = mutant(BUG_CLASS, attention_entry(Attention), llama_block_entry(Block))
