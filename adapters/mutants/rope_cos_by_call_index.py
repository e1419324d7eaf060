"""Causal self-attention whose RoPE gathers its sin table at the tokens' position ids and its
cos table by their index in the call (``cos = cos[:seq_len]`` beside ``sin =
sin[position_ids]``, a refactor to the older slicing done for one table only). On a call
numbered 0 .. L-1 nothing shows; a cached step, left padding or long positions give each
pair two different angles, so the map is no rotation (SPEC.md §2.3, §2.4)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry, rotate_half
from .tutorial import mutant

BUG_CLASS = "rope_cos_by_call_index"
EXPECTED_CODES = frozenset({"rope.not_norm_preserving"})


class Attention(gpt_tutorial.Attention):
    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:  # x (B, H, n, hd)
        inv_freq = self.inv_freq.to(positions.device)
        index = torch.arange(x.shape[-2], device=positions.device).expand_as(positions)
        by_id = positions.double()[:, None, :, None] * inv_freq
        by_index = index.double()[:, None, :, None] * inv_freq  # BUG: positions
        cos = torch.cat((by_index, by_index), dim=-1).cos().to(x.dtype)
        sin = torch.cat((by_id, by_id), dim=-1).sin().to(x.dtype)
        return x * cos + rotate_half(x) * sin


adapter = mutant(BUG_CLASS, attention_entry(Attention))
