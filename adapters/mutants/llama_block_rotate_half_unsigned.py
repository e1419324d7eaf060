"""A Llama block whose ``rotate_half`` lost its minus sign in a retyped port:
``torch.cat((x2, x1), dim=-1)`` for ``torch.cat((-x2, x1), dim=-1)``. ``x * cos +
rotate_half(x) * sin`` then gives both members of a pair ``+ sin``: no rotation, so a key's
norm changes with its position and the scores are no function of the distance (SPEC.md §2.3,
§2.4). Offered as the block alone, as a model that exposes no RoPE subject is."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import llama_block_entry
from .tutorial import mutant

BUG_CLASS = "llama_block_rotate_half_unsigned"
EXPECTED_CODES = frozenset({"rope.not_norm_preserving"})


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((x2, x1), dim=-1)  # BUG: torch.cat((-x2, x1), dim=-1)


class Attention(gpt_tutorial.Attention):
    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:  # x (B, H, n, hd)
        inv_freq = self.inv_freq.to(positions.device)
        freqs = positions.double()[:, None, :, None] * inv_freq  # (B, 1, n, hd/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return x * emb.cos().to(x.dtype) + rotate_half(x) * emb.sin().to(x.dtype)


class Block(gpt_tutorial.Block):
    attention = Attention


adapter = mutant(BUG_CLASS, llama_block_entry(Block))
