"""A Llama-style attention that rotates its queries and keys per head on the (B, n, H, d)
view, as llm-foundry's MPT does before its ``rearrange``, and then cuts the keys into heads
from the rotated (B, n, H*d) with the factors swapped (``view(b, n, d, H)`` for ``view(b, n,
H, d)``: einops' ``b s (h d) -> b h s d`` written out by hand): each key head is a comb of
every head's rotated features (SPEC.md §3.3, §2.3)."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry, llama_block_entry
from .tutorial import mutant

BUG_CLASS = "lm_keys_split_feature_major_after_rope"
EXPECTED_CODES = frozenset({"attention.heads_split_wrong_order"})


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
        q, k, v = self.project(x)
        q, k = self.rotate(q, positions), self.rotate(k, positions)
        k = k.transpose(1, 2).reshape(b, n, -1)  # (B, n, H_kv * d), rotated
        k = k.view(b, n, self.head_dim, self.n_kv_heads).permute(0, 3, 1, 2)  # BUG: (H_kv, d)
        cache = self.extend_cache(cache, k, v)
        k, v = self.repeat_kv(cache[0]), self.repeat_kv(cache[1])
        att = (q @ k.transpose(-2, -1)) * self.scale()
        att = self.masked(att, n, past > 0, pad_mask)
        y = (self.weights(att) @ v).transpose(1, 2).reshape(b, n, -1)
        return self.wo(y), cache


class Block(gpt_tutorial.Block):
    attention = Attention


adapter = mutant(BUG_CLASS, attention_entry(Attention), llama_block_entry(Block))
