"""A decoder-only attention whose future mask starts one column early: ``triu(diagonal=t - n)``
where ``t - n + 1`` is meant, so each token is hidden from itself and the first token has no
key at all (its row is zeroed by ``nan_to_num``).

Cited: RVC-Boss/GPT-SoVITS#965 (the ``diagonal`` of a causal mask off by one: "the causal mask
does not include the current position"); pbloem/former#10 (an offset of 0 in ``triu_indices``
masks the diagonal).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .tutorial import mutant

BUG_CLASS = "decoder_causal_diagonal"
EXPECTED_CODES = frozenset({"mask.causal_diagonal_hidden"})


class Attention(gpt_tutorial.Attention):
    def future_mask(self, n: int, t: int, cached: bool) -> Tensor:
        return torch.ones(n, t, dtype=torch.bool).triu(diagonal=t - n)  # BUG: hides i == j


adapter = mutant(BUG_CLASS, gpt_tutorial.attention_entry(Attention))
