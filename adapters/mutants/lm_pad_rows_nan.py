"""A GPT whose attention fills masked scores with -inf and drops the guard for a query that
sees no key: under left padding the first pads see only pads, their softmax is 0/0, and the
next layer's zero weight on those pads' NaN values (0 * NaN) makes every real token NaN. The
adapter declares fully_masked_rows='zero', what the guard (``nan_to_num``) gave. Resembles
pytorch/pytorch#26098 (``float('-inf')`` in ``multi_head_attention_forward``'s padding fill),
huggingface/transformers#15326 and NVIDIA-BioNeMo/bionemo-recipes#35 (-inf replaced by the
dtype's lowest value to keep all-masked rows finite); SPEC.md §4.4, §11.7."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "lm_pad_rows_nan"
EXPECTED_CODES = frozenset({"mask.fully_masked_rows_nan"})


class Attention(gpt_tutorial.Attention):
    def weights(self, scores: Tensor) -> Tensor:
        return torch.softmax(scores, dim=-1)  # BUG: a pad that sees nothing is 0/0


class Block(gpt_tutorial.Block):
    attention = Attention


class GPT(gpt_tutorial.GPT):
    block = Block


adapter = mutant(BUG_CLASS, gpt_entry(GPT))
