"""RoPE in low precision: the inverse frequencies are a registered buffer, so
``model.half()`` / ``.to(torch.bfloat16)`` converts them, and ``positions.to(inv_freq.dtype)``
rounds the positions too. bfloat16 cannot represent 257, float16 cannot represent 4097: the
angles of long positions turn by radians (huggingface/transformers#29285, NVIDIA/Megatron-LM#535,
EleutherAI/gpt-neox#1016). In float64 it is exact, so only the dtype checks see it (SPEC.md §10.10).
"""

from __future__ import annotations

from . import tutorial
from .tutorial import mutant, rope_entry

BUG_CLASS = "rope_low_precision"
EXPECTED_CODES = frozenset({"numerics.rope_angles_low_precision"})


class RotaryEmbedding(tutorial.RotaryEmbedding):
    def __init__(self, dim: int, base: float = 10000.0):
        super().__init__(dim, base)
        inv_freq = self.inv_freq
        del self.inv_freq
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # BUG: follows .to(dtype)


adapter = mutant(BUG_CLASS, rope_entry(RotaryEmbedding))
