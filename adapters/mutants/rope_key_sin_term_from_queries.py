"""Causal self-attention whose RoPE builds each rotated key from the key's cos term and the
query's rotate_half term: ``k_embed = k * cos + rotate_half(q) * sin``, the ``q_embed``
line copied with one ``q`` left in. Query content leaks into every key; with as many key
heads as query heads nothing fails to run (SPEC.md §2.3, §11.1)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry, rotate_half
from .tutorial import mutant

BUG_CLASS = "rope_key_sin_term_from_queries"
EXPECTED_CODES = frozenset({"rope.tensors_mixed"})


class Attention(gpt_tutorial.Attention):
    queries: Tensor | None = None

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = super().project(x)
        self.queries = q  # the forward rotates q, then k
        return q, k, v

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        q = self.queries
        if q is None or x is q or x.shape != q.shape:
            return super().rotate(x, positions)
        freqs = positions.double()[:, None, :, None] * self.inv_freq.to(positions.device)
        emb = torch.cat((freqs, freqs), dim=-1)
        return x * emb.cos().to(x.dtype) + rotate_half(q) * emb.sin().to(x.dtype)  # BUG: (x)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
