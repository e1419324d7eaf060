"""Llama 3.1's RoPE frequency scaling declared and never applied: the config says
``rope_type: llama3`` (SPEC.md §2.6) and the rotary embedding is built from the base alone,
so every position is rotated at the unscaled frequencies. Short contexts hide it (position 0
is exact; the phase error grows with the position). Cited: sbryngelson/ANEForge#58 ("computed
RoPE from rope_theta alone and ignored the HF rope_scaling field"), Blaizzy/mlx-vlm#1710 (ten
models "declare rope_scaling ... and then build a plain nn.RoPE without passing it"),
unslothai/unsloth#6197 ("Llama-3.1 / 3.2 / 3.3 ran with unscaled RoPE"). The declared
original context is 32 positions, so that the test sizes reach the scaled wavelengths.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "rope_scaling_ignored"
EXPECTED_CODES = frozenset({"rope.scaling_none"})
# what the model declares: Llama 3.1's rule, at an original context of 32 positions
SCALING = {
    "rope_scaling": "llama3",
    "rope_scaling_factor": 8.0,
    "rope_low_freq_factor": 1.0,
    "rope_high_freq_factor": 4.0,
    "rope_original_max_positions": 32,
}


class Attention(gpt_tutorial.Attention):
    def __init__(self, *args: Any, rope_scaling: dict[str, Any] | None = None, **kw: Any):
        super().__init__(*args, **kw)  # BUG: inv_freq from the base alone, never scaled
        self.rope_scaling = rope_scaling or dict(SCALING)


_ENTRY = attention_entry(Attention)
adapter = mutant(
    BUG_CLASS,
    dataclasses.replace(_ENTRY, conventions=dataclasses.replace(_ENTRY.conventions, **SCALING)),
)
