"""RoPE whose inverse frequencies step the exponent by 4i/d, ``arange(0, d, 2) / (d / 2)``
for ``arange(0, d, 2) / d``: every frequency is the spec's squared, base^(-4i/d), which is
the table of the base squared; the diagnosis names the exponent, not a base of 1e8.
Resembles the ``dim`` / ``dim // 2`` confusions of RoPE ports (the head dimension halved
before ``inv_freq`` is formed).
"""

from __future__ import annotations

from typing import Any

import torch

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "rope_exponent_doubled"
EXPECTED_CODES = frozenset({"positional.frequency_wrong"})


class Attention(gpt_tutorial.Attention):
    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        half = self.head_dim // 2
        steps = torch.arange(0, self.head_dim, 2).double() / half  # BUG: / (d / 2)
        self.inv_freq = 1.0 / (10000.0**steps)


adapter = mutant(BUG_CLASS, attention_entry(Attention))
