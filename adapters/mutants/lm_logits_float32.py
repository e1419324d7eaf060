"""A Llama that declares its norms' float32 statistics (Meta's ``x.float()``, SPEC.md
§10.12) and returns its logits ``.float()``, as transformers' Llama and Gemma did to upcast
16-bit logits for the loss (huggingface/transformers#29285): in a float64 build that rounds
the output itself to float32, a step no declaration covers. Within the float32 bound the
declared island sets, every comparison passes; the output's values, every one exactly a
float32 number, show the cast: ``numerics.float32_island``."""

from __future__ import annotations

import dataclasses

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import llama_entry
from .tutorial import mutant

BUG_CLASS = "lm_logits_float32"
EXPECTED_CODES = frozenset({"numerics.float32_island"})


class RMSNorm(gpt_tutorial.RMSNorm):
    def normed(self, x: Tensor) -> Tensor:  # Meta's: the statistics of x.float(), declared
        xf = x.float()
        return (xf * xf.pow(2).mean(-1, keepdim=True).add(self.eps).rsqrt()).type_as(x)


class Block(gpt_tutorial.Block):
    rms_norm = RMSNorm


class Llama(gpt_tutorial.Llama):
    block = Block
    rms_norm = RMSNorm

    def forward(self, ids, pad_mask=None, positions=None, caches=None):  # type: ignore[no-untyped-def]
        logits, caches = super().forward(ids, pad_mask, positions, caches)
        return logits.float(), caches  # BUG: a float64 build's logits rounded to float32


entry = llama_entry(Llama)
adapter = mutant(
    BUG_CLASS,
    dataclasses.replace(
        entry,
        conventions=dataclasses.replace(entry.conventions, float32_steps=("norm_statistics",)),
    ),
)
