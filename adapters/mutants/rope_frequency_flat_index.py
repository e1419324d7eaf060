"""RoPE whose frequency index runs over the whole query or key projection instead of within
each head: llama2.c's ``int head_dim = i % head_size`` written ``head_dim = i``, so pair j of
head h turns with 10000^(-(h * d_head + 2j) / d_head). Head 0 is right; every other head
turns 10000^h times slower, and a one-head model hides it (SPEC.md §2.3)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry, llama_block_entry
from .tutorial import mutant

BUG_CLASS = "rope_frequency_flat_index"
EXPECTED_CODES = frozenset({"positional.frequency_wrong"})


class Attention(gpt_tutorial.Attention):
    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:  # x (B, H, n, hd)
        heads, hd = x.shape[1], self.head_dim
        flat = torch.arange(0, heads * hd, 2).double().view(heads, hd // 2)  # BUG: not % hd
        inv_freq = 1.0 / (10000.0 ** (flat / hd))  # (H, hd/2)
        freqs = positions.double()[:, None, :, None] * inv_freq[None, :, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)  # (B, H, n, hd)
        return x * emb.cos().to(x.dtype) + gpt_tutorial.rotate_half(x) * emb.sin().to(x.dtype)


class Block(gpt_tutorial.Block):
    attention = Attention


adapter = mutant(BUG_CLASS, attention_entry(Attention), llama_block_entry(Block))
