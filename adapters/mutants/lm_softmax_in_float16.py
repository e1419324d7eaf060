"""A Llama-style causal LM whose attention probabilities are formed in float16 whatever the
model's dtype (``softmax(scores, dim=-1, dtype=torch.float16).to(scores.dtype)``: a
mixed-precision port's dtype pinned where the scores' belongs). A float64 or float32 build
rounds every attention weight to float16 (SPEC.md §10.10, §10.12)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import llama_entry
from .tutorial import mutant

BUG_CLASS = "lm_softmax_in_float16"
EXPECTED_CODES = frozenset({"numerics.softmax_low_precision"})


class Attention(gpt_tutorial.Attention):
    def weights(self, scores: Tensor) -> Tensor:
        # BUG: dtype=torch.float16 (softmax in the scores' dtype)
        return torch.softmax(scores, dim=-1, dtype=torch.float16).to(scores.dtype).nan_to_num(0.0)


class Block(gpt_tutorial.Block):
    attention = Attention


class Llama(gpt_tutorial.Llama):
    block = Block


adapter = mutant(BUG_CLASS, llama_entry(Llama))
