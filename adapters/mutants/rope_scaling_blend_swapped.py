"""Llama 3.1's RoPE frequency scaling (SPEC.md §2.6) at its shipped numbers (base 500000,
factor 8, original context 8192) with the blend's weights swapped:
``smooth * inv_freq / factor + (1 - smooth) * inv_freq`` for
``(1 - smooth) * inv_freq / factor + smooth * inv_freq``. Only a pair in the blended band
(wavelengths 2048 .. 8192) moves, by a factor of about two. At the suite's default head
dimension (d_k = 6: wavelengths 6.3, 499 and 39 600) no pair lies in that band, so every
call at that size passes; the oracle check must choose a head dimension with a pair in each
band (d_k = 8 puts pair 2's wavelength at 4443)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "rope_scaling_blend_swapped"
EXPECTED_CODES = frozenset({"positional.frequency_wrong"})
BASE = 500000.0
SCALING = {
    "pe_base": BASE,
    "rope_scaling": "llama3",
    "rope_scaling_factor": 8.0,
    "rope_low_freq_factor": 1.0,
    "rope_high_freq_factor": 4.0,
    "rope_original_max_positions": 8192,
}


def llama3_inv_freq(head_dim: int) -> torch.Tensor:
    inv_freq = 1.0 / BASE ** (torch.arange(0, head_dim, 2).double() / head_dim)
    factor = SCALING["rope_scaling_factor"]
    low, high = SCALING["rope_low_freq_factor"], SCALING["rope_high_freq_factor"]
    original = SCALING["rope_original_max_positions"]
    wavelen = 2 * math.pi / inv_freq
    smooth = (original / wavelen - low) / (high - low)
    blended = smooth * inv_freq / factor + (1 - smooth) * inv_freq  # BUG: the weights swapped
    scaled = torch.where(wavelen > original / low, inv_freq / factor, blended)
    return torch.where(wavelen < original / high, inv_freq, scaled)


class Attention(gpt_tutorial.Attention):
    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.inv_freq = llama3_inv_freq(self.head_dim)


_ENTRY = attention_entry(Attention)
adapter = mutant(
    BUG_CLASS,
    dataclasses.replace(_ENTRY, conventions=dataclasses.replace(_ENTRY.conventions, **SCALING)),
)
