"""A rotary base hard-coded to 1e6 (Qwen2's rope_theta) in a model whose config declares the
default 10000: no list of usual bases (1e4, 1e3, 5e5) holds it, so the diagnosis must solve
for the base. Resembles: sgl-project/SpecForge#265 and NVIDIA/TransformerEngine#944 (a base
hard-coded instead of read from the config), here with the other value.
"""

from __future__ import annotations

from typing import Any

import torch

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "rope_theta_hardcoded"
EXPECTED_CODES = frozenset({"positional.base_wrong"})
HARD_CODED = 1_000_000.0


class Attention(gpt_tutorial.Attention):
    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        steps = torch.arange(0, self.head_dim, 2).double() / self.head_dim
        self.inv_freq = 1.0 / (HARD_CODED**steps)  # BUG: not the declared base


adapter = mutant(BUG_CLASS, attention_entry(Attention))
