"""Position ids not shifted for left padding: a GPT-2 style model that numbers every row
0 .. L-1 from the first pad, so a left-padded prompt reads the position table off by its
number of pads (the generate() bug fixed by position_ids = attention_mask.cumsum(-1) - 1).
The model makes its own position ids from the padding mask, as its decoding loop expects.
Its adapter declares, as adapters of transformers' GPT-2 do, that a query with no key is not
promised (fully_masked_rows='undefined'): the oracle's hypotheses must still tell the real
tokens' positions, though in a stack the oracle's unpromised pad rows would reach them."""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from tck.reference import DECODER_CANONICAL

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "left_pad_positions"
EXPECTED_CODES = frozenset({"padding.left_positions_not_shifted"})


class GPT(gpt_tutorial.GPT):
    def positions_from(self, pad_mask: Tensor | None, b: int, n: int, past: int) -> Tensor:
        return torch.arange(past, past + n).expand(b, n)  # BUG: pads counted


def forward(m, ids, key_padding=None, positions=None):  # numbering left to the model
    return m(ids, key_padding)[0]


def step(m, caches, ids, key_padding=None, positions=None):
    return m(ids, key_padding, None, caches)


UNDEFINED = dataclasses.replace(
    DECODER_CANONICAL, fully_masked_rows="undefined", activation="gelu_tanh"
)
adapter = mutant(BUG_CLASS, gpt_entry(GPT, forward=forward, step=step, conventions=UNDEFINED))
