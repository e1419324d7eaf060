"""Causal self-attention that reads its key-padding keep-mask inverted and applies it as an
additive ``finfo.min`` bias, the causal triangle staying -inf: in a right-padded or unpadded
row every key a real query may see is real, so every one of them is hidden by the same
finite fill, and the query takes the plain average of the values before it instead of an
empty row (transformers' ``_prepare_4d_attention_mask`` style bias built from
``attention_mask`` where ``1 - attention_mask`` is meant; a ``keep`` mask passed where a
pad mask is expected). The -inf version of the bug leaves such rows with no key at all."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry, llama_block_entry
from .tutorial import mutant

BUG_CLASS = "padding_inverted_finite_fill"
EXPECTED_CODES = frozenset({"mask.polarity_inverted"})


class Attention(gpt_tutorial.Attention):
    def masked(self, scores: Tensor, n: int, cached: bool, pad_mask: Tensor | None) -> Tensor:
        t = scores.shape[-1]
        scores = scores.masked_fill(self.future_mask(n, t, cached), -torch.inf)
        if pad_mask is None:
            return scores
        fill = torch.finfo(scores.dtype).min
        return scores + pad_mask[:, None, None, :].to(scores.dtype) * fill  # BUG: (1 - mask)


class Block(gpt_tutorial.Block):
    attention = Attention


adapter = mutant(BUG_CLASS, attention_entry(Attention), llama_block_entry(Block))
