"""Rotary embedding (interleaved pairs, as in the RoFormer paper) whose angles come from
``torch.arange(seq_len)``: the position ids it is given are never used.

Bug source: NVIDIA/Megatron-LM issue #453 "[BUG] RoPE ignores position IDs" (the rotary tensor
"will still use the embeddings from position 0 to sequence length - 1"); epfLLM/Megatron-LLM
issue #23 "Passed position_ids are ignored for PositionEmbeddingType.rotary".
"""

from __future__ import annotations

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter


class RotaryEmbedding(nn.Module):
    def __init__(self, dim: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, x, position_ids):  # x [B, H, L, d]
        seq_len = x.shape[-2]
        # the bug: position_ids is unused; positions are assumed to be 0 .. seq_len - 1
        t = torch.arange(seq_len, device=x.device, dtype=self.inv_freq.dtype)
        freqs = torch.outer(t, self.inv_freq)  # [L, d/2]
        cos, sin = freqs.cos(), freqs.sin()
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


ONLY = ("rope",)
LABEL = "rope.positions_ignored"

adapter = TorchModuleAdapter(
    "heldout.rope_ignores_positions",
    [
        TorchEntry(
            "rope",
            make=lambda c: RotaryEmbedding(c.d_model // c.n_heads),
            forward=lambda m, x, positions: m(x, positions),
            # inv_freq is a buffer: .half() would round the frequencies (a second bug)
            dtypes=("float64", "float32"),
        )
    ],
)
