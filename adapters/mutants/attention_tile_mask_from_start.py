"""Causal self-attention by an online softmax over key tiles of 4 (FlashAttention's loop,
running statistics in float32) whose every tile reads the mask's first columns:
``hidden[..., : stop - start]`` for ``hidden[..., start:stop]``, the mask slice not offset by
the tile's start (a pointer into the mask never advanced). Past the first tile the causal
triangle and the padding fall on other keys: later queries lose keys they may see and see
keys after them (SPEC.md §3.1, §4.1, §4.3)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .gpt_tutorial import attention_entry
from .softmax_online_half import Attention as OnlineAttention
from .tutorial import mutant

BUG_CLASS = "attention_tile_mask_from_start"
EXPECTED_CODES = frozenset({"attention.tile_mask_misaligned"})
KEY_TILE = 4


def tiled_attention(q: Tensor, k: Tensor, v: Tensor, hidden: Tensor, scale: float) -> Tensor:
    """softmax(q k^T * scale, keys where ``hidden`` is False) v, one key tile at a time."""
    work = torch.promote_types(q.dtype, torch.float32)
    m = torch.full((*q.shape[:-1], 1), -math.inf, dtype=work)
    total = torch.zeros((*q.shape[:-1], 1), dtype=work)
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=work)
    for start in range(0, k.shape[-2], KEY_TILE):
        stop = min(start + KEY_TILE, k.shape[-2])
        s = (q @ k[..., start:stop, :].transpose(-2, -1)).to(work) * scale
        s = s.masked_fill(hidden[..., : stop - start], -math.inf)  # BUG: [..., start:stop]
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        m_safe = m_new.masked_fill(m_new == -math.inf, 0.0)
        p = torch.exp(s - m_safe)
        alpha = torch.exp(m - m_safe)
        total = total * alpha + p.sum(dim=-1, keepdim=True)
        acc = acc * alpha + p @ v[..., start:stop, :].to(work)
        m = m_new
    return (acc / torch.where(total > 0, total, torch.ones_like(total))).to(q.dtype)


class Attention(OnlineAttention):
    kernel = staticmethod(tiled_attention)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
