"""RoPE that ignores the position ids it is given and rotates by the index in the sequence
(0 .. L-1). Cited: NVIDIA/Megatron-LM#453 ("[BUG] RoPE ignores position IDs": with
--reset-position-ids the rotary embedding "will still use the embeddings from position 0 to
sequence length - 1").
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import mutant, rope_entry

BUG_CLASS = "rope_positions_ignored"
EXPECTED_CODES = frozenset({"rope.positions_ignored"})


class RotaryEmbedding(tutorial.RotaryEmbedding):
    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        seq = torch.arange(x.shape[-2], device=x.device)  # BUG: positions never used
        return super().forward(x, seq)


adapter = mutant(BUG_CLASS, rope_entry(RotaryEmbedding))
