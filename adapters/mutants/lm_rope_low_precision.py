"""A Llama-style causal LM whose rotary inverse frequencies are a registered buffer, so
``model.half()`` / ``.to(torch.bfloat16)`` rounds them, and whose positions are cast to the
frequencies' dtype (``t = positions.to(inv_freq.dtype)``, as in ``rope_low_precision``;
huggingface/transformers#29285), offered only as the whole model: bfloat16 cannot hold 257,
float16 not 4097, so consecutive long positions collapse and the relative angles between
tokens turn by radians; float64 is exact (SPEC.md §2.3, §10.10). The user exposes
``causal_lm`` alone, so only stress through the whole model can see it."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import llama_entry, rotate_half
from .tutorial import mutant

BUG_CLASS = "lm_rope_low_precision"
EXPECTED_CODES = frozenset({"numerics.rope_angles_low_precision"})


class Attention(gpt_tutorial.Attention):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        inv_freq = self.inv_freq
        del self.inv_freq
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # BUG: follows .to(dtype)

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        t = positions.to(self.inv_freq.dtype)  # BUG: positions in the buffer's 16-bit dtype
        freqs = t[:, None, :, None] * self.inv_freq  # (B, 1, n, hd/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return x * emb.cos().to(x.dtype) + rotate_half(x) * emb.sin().to(x.dtype)


class Block(gpt_tutorial.Block):
    attention = Attention


class Llama(gpt_tutorial.Llama):
    block = Block


adapter = mutant(BUG_CLASS, llama_entry(Llama))
