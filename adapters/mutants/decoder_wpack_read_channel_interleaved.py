"""Causal self-attention with a fused ``W_pack`` projection (Baichuan's, stored as the three
blocks [Wq; Wk; Wv]) whose output is unpacked as if q, k and v were interleaved channel by
channel: ``proj.unflatten(-1, (D, 3))`` where ``unflatten(-1, (3, D))`` belongs, as a port
that guesses the fused layout of another checkpoint does. Every query, key and value
channel is then a row of the wrong matrix, a mix of all three; the shapes agree, so nothing
raises (SPEC.md §3.4)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "decoder_wpack_read_channel_interleaved"
EXPECTED_CODES = frozenset({"attention.qkv_order_wrong"})


class Attention(gpt_tutorial.Attention):
    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if self.n_kv_heads != self.n_heads:  # W_pack fuses three projections of one width
            return super().project(x)
        b, n, _ = x.shape
        proj = torch.cat([self.wq(x), self.wk(x), self.wv(x)], dim=-1)  # W_pack: [q | k | v]
        q, k, v = proj.unflatten(-1, (-1, 3)).unbind(-1)  # BUG: (3, D), not (D, 3)
        return tuple(t.view(b, n, self.n_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))  # type: ignore[return-value]


adapter = mutant(BUG_CLASS, attention_entry(Attention))
