"""RoPE on part of each head only: a partial rotary (GPT-NeoX's ``rotary_pct``, Phi's
``partial_rotary_factor = 0.5``) copied into a model that rotates every channel. The first
half of each head's channels is rotated (``rotate_half`` within it, frequencies over the
rotated width), the second half passed through; the checkpoint was trained with every
channel rotated (SPEC.md §2.3)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry, llama_block_entry
from .tutorial import mutant

BUG_CLASS = "rope_partial_rotary"
EXPECTED_CODES = frozenset({"positional.frequency_wrong"})


class Attention(gpt_tutorial.Attention):
    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:  # x (B, H, n, hd)
        rotary = self.head_dim // 4 * 2  # BUG: partial_rotary_factor 0.5 (even) for 1.0
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rotary, 2).double() / rotary))
        freqs = positions.double()[:, None, :, None] * inv_freq  # (B, 1, n, rotary/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        part, rest = x[..., :rotary], x[..., rotary:]
        turned = part * emb.cos().to(x.dtype) + gpt_tutorial.rotate_half(part) * emb.sin().to(
            x.dtype
        )
        return torch.cat([turned, rest], dim=-1)


class Block(gpt_tutorial.Block):
    attention = Attention


adapter = mutant(BUG_CLASS, attention_entry(Attention), llama_block_entry(Block))
