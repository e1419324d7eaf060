"""Key/value heads grouped by tiling: ``k.repeat(1, g, 1, 1)`` gives query head h the key/value
head h mod H_kv, where grouped-query attention gives it head h // g (``repeat_interleave``,
transformers' ``repeat_kv``). Invisible with n_kv_heads = 1 or n_heads."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "kv_heads_tiled"
EXPECTED_CODES = frozenset({"attention.kv_heads_tiled"})


class Attention(gpt_tutorial.Attention):
    def repeat_kv(self, x: Tensor) -> Tensor:
        return x.repeat(1, self.n_rep, 1, 1)  # BUG: the group tiled, not each head repeated


adapter = mutant(BUG_CLASS, attention_entry(Attention))
