"""Causal self-attention reading its key-padding mask inverted: ``masked_fill(pad_mask ==
1, -inf)`` for ``== 0``, so every real token attends only the pads (and a row without pads
has no key at all). Resembles Oneflow-Inc/libai#61 (a padding mask passed with the opposite
polarity: True taken as padding). On a causal subject the probes of the encoder's masks
do not run; the oracle comparison of right-padded rows and the left-padding checks see it
(SPEC.md §4.2, §11.7)."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "causal_padding_polarity"
EXPECTED_CODES = frozenset({"mask.polarity_inverted"})


class Attention(gpt_tutorial.Attention):
    def padding_mask(self, pad_mask: Tensor, n: int) -> Tensor:
        return pad_mask[:, None, None, :] == 1  # BUG: == 0


adapter = mutant(BUG_CLASS, attention_entry(Attention))
