"""A Llama-style causal LM whose RMSNorm forms its mean square in the input dtype (no
``.to(torch.float32)`` first, as in ``rms_norm_low_precision``), offered only as the whole
model: in float16 ``x**2`` overflows once an outlier channel of the residual stream passes
256 and the token's row becomes 0 (SPEC.md §10.10). The user exposes ``causal_lm`` alone, so
only stress through the whole model can see it."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import llama_entry
from .tutorial import mutant

BUG_CLASS = "lm_rms_norm_low_precision"
EXPECTED_CODES = frozenset({"numerics.norm_statistics_low_precision"})  # in float16


class RMSNorm(gpt_tutorial.RMSNorm):
    def normed(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)  # BUG: no float32


class Block(gpt_tutorial.Block):
    rms_norm = RMSNorm


class Llama(gpt_tutorial.Llama):
    block, rms_norm = Block, RMSNorm


adapter = mutant(BUG_CLASS, llama_entry(Llama))
