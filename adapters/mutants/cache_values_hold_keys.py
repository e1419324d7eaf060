"""A KV cache whose value half is written with the keys: ``values[..., F:F + n] = keys`` (a
copy-paste of the key line), so every call that goes through the cache, the prefill
included, weighs the tokens' rotated keys where their values belong. The plain forward
reads no cache and is right (SPEC.md §11.6, §3.1).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .cache_slot_late import _step
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_values_hold_keys"
EXPECTED_CODES = frozenset({"attention.value_uses_key_projection"})


class Attention(gpt_tutorial.Attention):
    def extend_cache(self, cache, k: Tensor, v: Tensor):
        if cache is None:
            return k, v
        return torch.cat([cache[0], k], dim=2), torch.cat([cache[1], k], dim=2)  # BUG: k


adapter = mutant(BUG_CLASS, attention_entry(Attention, step=_step))
