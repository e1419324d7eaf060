"""RoPE whose angles are cast to the model's dtype before the cosine and sine are taken:
``(positions * inv_freq).to(x.dtype).cos()`` for ``(positions * inv_freq).cos().to(x.dtype)``.
In float16 an angle near 100 is off by up to 0.03 rad, so far positions rotate wrongly; in
float32 and float64 nothing changes (huggingface/transformers#29285 is the same class: the
angles formed in a 16-bit dtype).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "rope_angles_half"
EXPECTED_CODES = frozenset({"numerics.rope_angles_low_precision"})


class Attention(gpt_tutorial.Attention):
    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:  # x (B, H, n, hd)
        inv_freq = self.inv_freq.to(positions.device)
        freqs = positions.double()[:, None, :, None] * inv_freq  # (B, 1, n, hd/2)
        emb = torch.cat((freqs, freqs), dim=-1).to(x.dtype)  # BUG: cast before cos and sin
        return x * emb.cos() + gpt_tutorial.rotate_half(x) * emb.sin()


adapter = mutant(BUG_CLASS, attention_entry(Attention))
