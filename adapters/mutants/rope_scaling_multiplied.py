"""Llama 3.1's RoPE frequency scaling (SPEC.md §2.6) with the long-wavelength band multiplied
by the factor instead of divided: ``torch.where(wavelen > low_freq_wavelen, inv_freq * factor,
...)`` for ``inv_freq / factor``. The short wavelengths are kept as the rule says and the blend
band is right, so no named scaling (none, linear, llama3) and no base reproduces the table:
only frequencies solved for pair by pair do. The declared original context is 32 positions,
so that the test sizes reach the scaled wavelengths."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "rope_scaling_multiplied"
EXPECTED_CODES = frozenset({"positional.frequency_wrong"})
SCALING = {
    "rope_scaling": "llama3",
    "rope_scaling_factor": 8.0,
    "rope_low_freq_factor": 1.0,
    "rope_high_freq_factor": 4.0,
    "rope_original_max_positions": 32,
}


def llama3_inv_freq(inv_freq: torch.Tensor) -> torch.Tensor:
    factor = SCALING["rope_scaling_factor"]
    low, high = SCALING["rope_low_freq_factor"], SCALING["rope_high_freq_factor"]
    original = SCALING["rope_original_max_positions"]
    wavelen = 2 * math.pi / inv_freq
    low_freq_wavelen, high_freq_wavelen = original / low, original / high
    smooth = (original / wavelen - low) / (high - low)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq * factor, blended)  # BUG: * for /
    return torch.where(wavelen < high_freq_wavelen, inv_freq, scaled)


class Attention(gpt_tutorial.Attention):
    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.inv_freq = llama3_inv_freq(self.inv_freq)


_ENTRY = attention_entry(Attention)
adapter = mutant(
    BUG_CLASS,
    dataclasses.replace(_ENTRY, conventions=dataclasses.replace(_ENTRY.conventions, **SCALING)),
)
