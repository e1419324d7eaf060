"""Causal self-attention reading its key-padding mask inverted: ``masked_fill(pad_mask ==
1, -inf)`` for ``== 0``, so every real token attends only the pads (and a row without pads
has no key at all). Resembles Oneflow-Inc/libai#61 (a padding mask passed with the opposite
polarity: True taken as padding). On a causal subject the probes of the encoder's masks
do not run; the oracle comparison of right-padded rows and the left-padding checks see it
(SPEC.md §4.2, §11.7)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "causal_padding_polarity"
EXPECTED_CODES = frozenset({"mask.polarity_inverted"})


class Attention(gpt_tutorial.Attention):
    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        pad_mask: Tensor | None = None,  # (B, T): 1 = token, 0 = padding
        cache: gpt_tutorial.Cache | None = None,
    ) -> tuple[Tensor, gpt_tutorial.Cache]:
        b, n, _ = x.shape
        past = 0 if cache is None else cache[0].shape[2]
        if positions is None:
            positions = self.default_positions(b, n, past)
        q = self.wq(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.rope:
            q, k = self.rotate(q, positions), self.rotate(k, positions)
        cache = self.extend_cache(cache, k, v)
        k, v = self.repeat_kv(cache[0]), self.repeat_kv(cache[1])
        att = (q @ k.transpose(-2, -1)) * self.scale()  # (B, H, n, T)
        att = att.masked_fill(self.future_mask(n, k.shape[2], past > 0), float("-inf"))
        if pad_mask is not None:
            att = att.masked_fill(pad_mask[:, None, None, :] == 1, float("-inf"))  # BUG: == 0
        att = torch.softmax(att, dim=-1).nan_to_num(0.0)  # a row with no key: zeros
        y = (att @ v).transpose(1, 2).reshape(b, n, -1)
        return self.wo(y), cache


adapter = mutant(BUG_CLASS, attention_entry(Attention))
