"""RoPE applied to the queries only: the keys enter the scores unrotated, so a score no
longer depends on the distance i - j alone. The same class covers the keys only and the
values rotated too (``rope_on_values``). The shape of the bug: a port that calls its
``apply_rotary_pos_emb`` on one tensor and forgets the other.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "rope_q_only"
EXPECTED_CODES = frozenset({"rope.applied_to_wrong_tensors"})
ROTATED = ("q",)  # the spec's: ("q", "k")


class Attention(gpt_tutorial.Attention):
    rotated: tuple[str, ...] = ROTATED

    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        pad_mask: Tensor | None = None,
        cache: Cache | None = None,
    ) -> tuple[Tensor, Cache]:
        b, n, _ = x.shape
        past = 0 if cache is None else cache[0].shape[2]
        if positions is None:
            positions = self.default_positions(b, n, past)
        q = self.wq(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        # BUG (this class): RoPE on the tensors of ``rotated`` instead of on q and k
        q = self.rotate(q, positions) if "q" in self.rotated else q
        k = self.rotate(k, positions) if "k" in self.rotated else k
        v = self.rotate(v, positions) if "v" in self.rotated else v
        cache = self.extend_cache(cache, k, v)
        k, v = self.repeat_kv(cache[0]), self.repeat_kv(cache[1])
        att = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, n, T)
        att = att.masked_fill(self.future_mask(n, k.shape[2], past > 0), float("-inf"))
        if pad_mask is not None:
            att = att.masked_fill(pad_mask[:, None, None, :] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1).nan_to_num(0.0)
        y = (att @ v).transpose(1, 2).reshape(b, n, -1)
        return self.wo(y), cache


adapter = mutant(BUG_CLASS, attention_entry(Attention))
