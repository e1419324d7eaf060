"""A decoder attention whose cache holds the keys unrotated and rotates the whole cache when
it is read, at the positions cached beside them (TransformerLens' ``apply_rotary`` over the
concatenated cache), with the new keys put before the cached ones in a copy-pasted
``torch.cat``: from the second call on, a key slot holds another token's key, turned to the
angle of the token whose value it sits beside (SPEC.md §11.6, §2.3)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_unrotated_keys_prepended"
EXPECTED_CODES = frozenset({"cache.keys_prepended"})

Cache = tuple[Tensor, Tensor, Tensor]  # unrotated keys, values, their positions


class Attention(gpt_tutorial.Attention):
    def forward(  # type: ignore[override]
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
        q, k, v = self.project(x)
        q = self.rotate(q, positions)
        if cache is not None:
            k = torch.cat([k, cache[0]], dim=2)  # BUG: torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
            positions = torch.cat([cache[2], positions.expand(b, n)], dim=1)
        cache = (k, v, positions.expand(b, -1))
        k = self.repeat_kv(self.rotate(k, cache[2]))
        v = self.repeat_kv(v)
        att = (q @ k.transpose(-2, -1)) * self.scale()
        att = self.masked(att, n, past > 0, pad_mask)
        y = (self.weights(att) @ v).transpose(1, 2).reshape(b, n, -1)
        return self.wo(y), cache


adapter = mutant(BUG_CLASS, attention_entry(Attention))
