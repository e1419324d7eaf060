"""A GPT-2 style model that numbers its tokens itself from the padding mask when it is given
no position ids (``cumsum(mask) - 1``, as OPT's ``OPTLearnedPositionalEmbedding`` does), its
adapter passing the ids when the caller has them, and a refactor that numbers by index
instead (``arange(past, past + n)``): every path that hands over positions is right, and a
left-padded prompt decoded without them reads the position table off by its number of pads
(transformers#24694: position ids of left-padded batches counted from the first pad). The
adapter declares the derivation (``derives_positions="padding"``), so the kit runs that
path."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "lm_own_positions_count_pads"
EXPECTED_CODES = frozenset({"padding.left_positions_not_shifted"})


class GPT(gpt_tutorial.GPT):
    def positions_from(self, pad_mask: Tensor | None, b: int, n: int, past: int) -> Tensor:
        return torch.arange(past, past + n).expand(b, n)  # BUG: cumsum(pad_mask) - 1


adapter = mutant(BUG_CLASS, gpt_entry(GPT))  # derives_positions='padding'
