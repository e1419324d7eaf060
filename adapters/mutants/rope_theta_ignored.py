"""``rope_theta`` from the config never reaches the rotary embedding: the frequencies are
built with the default base 10000 while the model (Llama 3 style) declares 500000. Cited:
sgl-project/SpecForge#265 ("rope_theta isn't pulled from the configs and used at all, so all
the rotary embeddings are using the default base=10000"), NVIDIA/TransformerEngine#944
("Expose rotary_base as an arg instead of hardcoding" it to 10000), sgl-project/SpecForge#651
(rope_theta "silently ignored and reset to the default value of 10000" on the scaled path).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "rope_theta_ignored"
EXPECTED_CODES = frozenset({"positional.base_wrong"})
ROPE_THETA = 500000.0  # what the model declares (Llama 3)


class Attention(gpt_tutorial.Attention):
    def __init__(self, *args: Any, rope_theta: float = ROPE_THETA, **kw: Any) -> None:
        super().__init__(*args, **kw)  # BUG: builds inv_freq with base 10000, not rope_theta
        self.rope_theta = rope_theta


_ENTRY = attention_entry(Attention)
adapter = mutant(
    BUG_CLASS,
    dataclasses.replace(
        _ENTRY, conventions=dataclasses.replace(_ENTRY.conventions, pe_base=ROPE_THETA)
    ),
)
