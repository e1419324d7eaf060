"""Causal self-attention by an online softmax over key tiles of 4 (FlashAttention's loop,
running statistics in float32) whose loop stops at the last whole tile:
``range(0, T - KEY_TILE + 1, KEY_TILE)`` for ``range(0, T, KEY_TILE)``, as a kernel written for
lengths that are multiples of its tile. The keys of a ragged last tile are never attended,
and a call with fewer than 4 keys attends none (its rows come out zero). Lengths that are
multiples of 4 hide it (SPEC.md §3.1)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .gpt_tutorial import attention_entry
from .softmax_online_half import Attention as OnlineAttention
from .tutorial import mutant

BUG_CLASS = "attention_ragged_tile_dropped"
EXPECTED_CODES = frozenset({"attention.ragged_key_tile_dropped"})
KEY_TILE = 4


def whole_tiles_attention(q: Tensor, k: Tensor, v: Tensor, hidden: Tensor, scale: float) -> Tensor:
    """softmax(q k^T * scale, keys where ``hidden`` is False) v, one key tile at a time."""
    work = torch.promote_types(q.dtype, torch.float32)
    m = torch.full((*q.shape[:-1], 1), -math.inf, dtype=work)
    total = torch.zeros((*q.shape[:-1], 1), dtype=work)
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=work)
    for start in range(0, k.shape[-2] - KEY_TILE + 1, KEY_TILE):  # BUG: no ragged last tile
        stop = start + KEY_TILE
        s = (q @ k[..., start:stop, :].transpose(-2, -1)).to(work) * scale
        s = s.masked_fill(hidden[..., start:stop], -math.inf)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        m_safe = m_new.masked_fill(m_new == -math.inf, 0.0)
        p = torch.exp(s - m_safe)
        alpha = torch.exp(m - m_safe)
        total = total * alpha + p.sum(dim=-1, keepdim=True)
        acc = acc * alpha + p @ v[..., start:stop, :].to(work)
        m = m_new
    return (acc / torch.where(total > 0, total, torch.ones_like(total))).to(q.dtype)


class Attention(OnlineAttention):
    kernel = staticmethod(whole_tiles_attention)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
