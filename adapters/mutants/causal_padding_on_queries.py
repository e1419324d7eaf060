"""Causal self-attention laying its key-padding mask over the queries:
``pad_mask[:, None, :, None]`` for ``pad_mask[:, None, None, :]``. Under right padding the
causal mask hides the difference (the real queries never reach the pads); under left padding
the real tokens attend the pads and the pad rows have no key. A cached step lays the mask of
its own n tokens over its queries, ``pad_mask[:, None, -n:, None]`` (SPEC.md §4.2, §11.7)."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "causal_padding_on_queries"
EXPECTED_CODES = frozenset({"mask.applied_to_queries"})


class Attention(gpt_tutorial.Attention):
    def padding_mask(self, pad_mask: Tensor, n: int) -> Tensor:
        return pad_mask[:, None, -n:, None] == 0  # BUG: over the queries, not the keys


adapter = mutant(BUG_CLASS, attention_entry(Attention))
