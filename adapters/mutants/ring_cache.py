"""Causal self-attention with a sliding window and a fixed-size ring cache (not a mutant: the
base of the ring-cache mutants).

The cache is a preallocated ring of ``window - 1`` slots per key/value head: token t is
written at slot ``t % size``, and a step attends the ring's live slots (read in token order)
and then its own new keys, as a static sliding-window cache does (transformers'
``SlidingWindowCache``, llama.cpp's ring of ``n_swa`` cells). Unlike Mistral's rolling buffer
(``torch.cat`` then keep the last window - 1) nothing is concatenated into the cache: slots
are overwritten in place, and each slot remembers which token it holds. The window is
declared as the ``sliding_window`` convention (SPEC.md §4.5).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry

WINDOW = 4  # each query sees its last 4 keys, its own included (SPEC.md §4.5)


class RingAttention(gpt_tutorial.Attention):
    window = WINDOW
    # the score of a hidden key: -inf (a row that keeps no key is NaN, then 0), or a finite
    # value such as torch.finfo(dtype).min (such a row weighs every key it read equally)
    fill: float | None = float("-inf")

    def ring_size(self) -> int:
        """Slots kept between calls: the window minus the query's own key."""
        return self.window - 1

    def read_slots(self, token: Tensor) -> Tensor:
        """The ring's live slots (``token`` (size,): the token each holds, -1 if none) in
        token order, oldest first."""
        live = torch.nonzero(token >= 0).flatten()
        return live[token[live].argsort()]

    def hidden(self, query_token: Tensor, key_token: Tensor) -> Tensor:
        """(n, T) True where a query must not look: a later key, or one out of the window."""
        q, k = query_token[:, None], key_token[None, :]
        return (k > q) | (k <= q - self.window)

    def key_padding(self, pad_mask: Tensor, key_token: Tensor) -> Tensor:
        """(B, 1, 1, T) True where the key is padding, read at each key's token index."""
        return pad_mask[:, key_token][:, None, None, :] == 0

    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        pad_mask: Tensor | None = None,  # (B, T): 1 = token, 0 = padding, over all tokens so far
        cache: dict[str, Any] | None = None,
    ) -> tuple[Tensor, dict[str, Any]]:
        b, n, _ = x.shape
        size, hd = self.ring_size(), self.head_dim
        if cache is None:
            cache = {
                "k": x.new_zeros(b, self.n_kv_heads, size, hd),
                "v": x.new_zeros(b, self.n_kv_heads, size, hd),
                "token": torch.full((size,), -1, dtype=torch.long),
                "seen": 0,
            }
        seen = cache["seen"]
        if positions is None:
            positions = self.default_positions(b, n, seen)
        q = self.wq(x).view(b, n, self.n_heads, hd).transpose(1, 2)
        k = self.wk(x).view(b, n, self.n_kv_heads, hd).transpose(1, 2)
        v = self.wv(x).view(b, n, self.n_kv_heads, hd).transpose(1, 2)
        if self.rope:
            q, k = self.rotate(q, positions), self.rotate(k, positions)
        live = self.read_slots(cache["token"])
        new_tokens = torch.arange(seen, seen + n)
        # the mask numbers the ring's keys oldest first: the order read_slots must give
        held = cache["token"][cache["token"] >= 0].sort().values
        key_token = torch.cat([held, new_tokens])  # (T,)
        keys = torch.cat([cache["k"][:, :, live], k], dim=2)  # (B, H_kv, T, hd)
        values = torch.cat([cache["v"][:, :, live], v], dim=2)
        att = (q @ self.repeat_kv(keys).transpose(-2, -1)) * self.scale()  # (B, H, n, T)
        fill = torch.finfo(att.dtype).min if self.fill is None else self.fill
        att = att.masked_fill(self.hidden(new_tokens, key_token), fill)
        if pad_mask is not None:
            att = att.masked_fill(self.key_padding(pad_mask, key_token), fill)
        att = torch.softmax(att, dim=-1).nan_to_num(0.0)  # a left pad sees nothing: zeros
        y = (att @ self.repeat_kv(values)).transpose(1, 2).reshape(b, n, -1)
        ring_k, ring_v, token = cache["k"].clone(), cache["v"].clone(), cache["token"].clone()
        for j in range(n):  # overwrite in place: token t at slot t % size
            slot = (seen + j) % size
            ring_k[:, :, slot], ring_v[:, :, slot] = k[:, :, j], v[:, :, j]
            token[slot] = seen + j
        return self.wo(y), {"k": ring_k, "v": ring_v, "token": token, "seen": seen + n}


def ring_entry(cls: type[RingAttention]) -> Any:
    """causal_self_attention with the ring cache, the window declared as a convention (and
    a finite fill as uniform fully-masked rows, SPEC.md §4.4)."""
    entry = attention_entry(cls)
    rows = "zero" if cls.fill == float("-inf") else "uniform"
    conventions = dataclasses.replace(
        entry.conventions, sliding_window=cls.window, fully_masked_rows=rows
    )
    return dataclasses.replace(entry, conventions=conventions)


class MinFillRingAttention(RingAttention):
    """The ring with Mistral's fill: hidden scores set to ``torch.finfo(dtype).min``."""

    fill = None
