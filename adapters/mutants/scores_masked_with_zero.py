"""Causal self-attention whose hidden scores (future keys, padding) are set to 0 instead of
-inf, ``att.masked_fill(hidden, 0.0)``: a fill meant for the weights after the softmax put on
the scores, so every masked key keeps the weight of a zero score (SPEC.md §4.1, §4.3). Public
reports of the class: awslabs/gluonts#1401 and Shujun-He/RibonanzaNet#5 (masked scores filled
with 1e-9 and -1e-9, "basically 0", which masks nothing)."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry, llama_block_entry
from .tutorial import mutant

BUG_CLASS = "scores_masked_with_zero"
EXPECTED_CODES = frozenset({"mask.added_as_bias"})


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
        q, k = self.rotate(q, positions), self.rotate(k, positions)
        cache = self.extend_cache(cache, k, v)
        k, v = self.repeat_kv(cache[0]), self.repeat_kv(cache[1])
        att = (q @ k.transpose(-2, -1)) * self.scale()
        att = att.masked_fill(self.hidden(n, k.shape[2], past > 0, pad_mask), 0.0)  # BUG: -inf
        y = (self.weights(att) @ v).transpose(1, 2).reshape(b, n, -1)
        return self.wo(y), cache


class Block(gpt_tutorial.Block):
    attention = Attention


adapter = mutant(BUG_CLASS, attention_entry(Attention), llama_block_entry(Block))
