"""A decoder whose attention fills hidden scores with ``torch.finfo(dtype).min`` and takes
the softmax in float32 whatever the model's dtype (``softmax(..., dtype=torch.float32)``, as
transformers' eager attention does): in a float64 build finfo(float64).min becomes -inf in
float32, so a left pad's query, which sees no key, is 0 / 0 = NaN, and the next layer's zero
weight on that pad's NaN value carries it to every real token. In float32 and 16-bit builds
the fill is finite and such a row is uniform, as declared (SPEC.md §4.4, §10.12)."""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import llama_entry
from .tutorial import mutant

BUG_CLASS = "softmax_float32_fill_overflow"
EXPECTED_CODES = frozenset({"numerics.float32_island"})


class Attention(gpt_tutorial.Attention):
    def weights(self, scores: Tensor) -> Tensor:
        filled = scores.clamp_min(torch.finfo(scores.dtype).min)  # -inf -> the dtype's lowest
        work = torch.float32 if scores.dtype == torch.float64 else scores.dtype  # BUG
        return torch.softmax(filled.to(work), dim=-1).to(scores.dtype)


class Block(gpt_tutorial.Block):
    attention = Attention


class Llama(gpt_tutorial.Llama):
    block = Block


_entry = llama_entry(Llama)
# a row with no key is uniform (finfo.min everywhere): declared so, as the model computes it
_entry = dataclasses.replace(
    _entry, conventions=dataclasses.replace(_entry.conventions, fully_masked_rows="uniform")
)
adapter = mutant(BUG_CLASS, _entry)
