"""Causal self-attention that combines its two removal masks (True = hidden: the future
triangle and the key padding) with AND where OR belongs, as Megatron-style code does when it
merges a padding mask into its causal ``attention_mask`` (``attention_mask & ~keep`` for
``attention_mask | ~keep``): a key is hidden only when it is both in the future and padding.
A call without padding keeps the causal mask alone and is right; with padding, every real
key after a query is attended. Hiding with AND is keeping with OR (SPEC.md §4.1)."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "causal_masks_combined_with_and"
EXPECTED_CODES = frozenset({"mask.combined_with_or"})


class Attention(gpt_tutorial.Attention):
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
        if self.rope:
            q, k = self.rotate(q, positions), self.rotate(k, positions)
        cache = self.extend_cache(cache, k, v)
        k, v = self.repeat_kv(cache[0]), self.repeat_kv(cache[1])
        att = (q @ k.transpose(-2, -1)) * self.scale()  # (B, H, n, T)
        hidden = self.future_mask(n, k.shape[2], past > 0)
        if pad_mask is not None:
            hidden = hidden & self.padding_mask(pad_mask, n)  # BUG: | (hide if either hides)
        att = att.masked_fill(hidden, float("-inf"))
        y = (self.weights(att) @ v).transpose(1, 2).reshape(b, n, -1)
        return self.wo(y), cache


adapter = mutant(BUG_CLASS, attention_entry(Attention))
