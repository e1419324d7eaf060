"""A Llama-style causal LM whose attention builds its masks as additive biases, as
transformers' decoders did before 4.36 (``_expand_mask(mask) + _make_causal_mask(...)``,
each ``finfo.min`` where hidden, summed), and expands the key-padding mask over the query
axis: ``mask[:, None, :, None]`` for ``mask[:, None, None, :]``. The real tokens attend the
left pads; a pad's row has every key at ``finfo.min`` and its future keys at
``2 * finfo.min = -inf``, so it averages the keys the causal mask left it, and the next
layer's real tokens read those averages (SPEC.md §4.2, §11.7)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import llama_entry
from .tutorial import mutant

BUG_CLASS = "lm_additive_padding_on_queries"
EXPECTED_CODES = frozenset({"mask.applied_to_queries"})


class Attention(gpt_tutorial.Attention):
    def masked(self, scores: Tensor, n: int, cached: bool, pad_mask: Tensor | None) -> Tensor:
        low = torch.finfo(scores.dtype).min
        bias = self.future_mask(n, scores.shape[-1], cached).to(scores.dtype) * low
        if pad_mask is not None:
            hidden = (pad_mask[:, None, -n:, None] == 0).to(scores.dtype)  # BUG: over queries
            bias = bias + hidden * low
        return scores + bias


class Block(gpt_tutorial.Block):
    attention = Attention


class Llama(gpt_tutorial.Llama):
    block = Block


adapter = mutant(BUG_CLASS, llama_entry(Llama))
