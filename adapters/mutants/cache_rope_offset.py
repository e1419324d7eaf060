"""RoPE at the wrong offset under the cache: a decoding loop that lets the model number the new
tokens, and a model that numbers them from 0 in every call instead of from the cache length
(Meta llama's ``freqs_cis[start_pos : start_pos + seqlen]`` written ``freqs_cis[:seqlen]``)."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_rope_offset"
EXPECTED_CODES = frozenset({"cache.rope_offset_wrong"})


class Attention(gpt_tutorial.Attention):
    def default_positions(self, batch: int, n: int, past: int) -> Tensor:
        return super().default_positions(batch, n, 0)  # BUG: the cache's length is not added


def step(m, cache, x, key_padding=None, positions=None):  # the loop leaves numbering to m
    return m(x, None, key_padding, cache)


adapter = mutant(BUG_CLASS, attention_entry(Attention, step=step))
