"""RoPE restarted at 0 in every call when the caller leaves the numbering to the model, as
generate() does: the model numbers the new tokens from 0 instead of from its cache's length
(Meta llama's ``freqs_cis[start_pos : start_pos + seqlen]`` written ``freqs_cis[:seqlen]``).
Its adapter passes position ids through when it is given them, and declares that the model
derives them itself (``derives_positions``), so only decoding without positions shows it."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_positions_restart"
EXPECTED_CODES = frozenset({"cache.rope_offset_wrong"})


class Attention(gpt_tutorial.Attention):
    def default_positions(self, batch: int, n: int, past: int) -> Tensor:
        return super().default_positions(batch, n, 0)  # BUG: the cache's length is not added


adapter = mutant(BUG_CLASS, attention_entry(Attention))
