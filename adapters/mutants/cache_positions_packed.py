"""Positions counted across a packed batch: a model that packs its rows into one sequence
(varlen attention, ``cu_seqlens``) and numbers each token by its index in the pack,
``arange(total)``, where each sequence's numbering restarts at its own start
(``arange(total) - cu_seqlens[seq]``). Row b's tokens are placed on from the rows before it.
RoPE's relative property hides it in a full forward (each row is rotated as a whole); under a
cache the shift of a row differs from call to call (its rows before it hold other lengths),
so its new tokens are rotated inconsistently with its cached keys (SPEC.md §11.6, §11.9).
The adapter leaves the numbering to the model (``derives_positions``), as generate() does."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_positions_packed"
EXPECTED_CODES = frozenset({"cache.rope_offset_wrong"})


class Attention(gpt_tutorial.Attention):
    def default_positions(self, batch: int, n: int, past: int) -> Tensor:
        # BUG: the pack's index, not restarted per row: row b's n tokens at past + b*n + i
        return past + torch.arange(batch * n).reshape(batch, n)


def step(m, cache, x, key_padding=None, positions=None):  # the loop leaves numbering to m
    return m(x, None, key_padding, cache)


adapter = mutant(BUG_CLASS, attention_entry(Attention, step=step))
