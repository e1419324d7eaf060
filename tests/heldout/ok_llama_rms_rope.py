"""CORRECT: Llama-style RMSNorm (statistics in float32 at least, as Meta's ``_norm(x.float())``)
and rotary embeddings through complex numbers (Meta's ``precompute_freqs_cis`` /
``apply_rotary_emb``: ``view_as_complex`` pairs channels (2i, 2i+1), the interleaved layout).

Style source: meta-llama/llama ``model.py`` (RMSNorm, precompute_freqs_cis, apply_rotary_emb).
It must pass with zero failures.
"""

from __future__ import annotations

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        # Meta writes x.float(): upcast half precision, but never downcast float64
        wide = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        return self._norm(wide).type_as(x) * self.weight


class Rotary(nn.Module):
    def __init__(self, head_dim: int, theta: float = 10000.0):
        super().__init__()
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float64)[: head_dim // 2] / head_dim
        self.register_buffer("freqs", 1.0 / (theta**exponents))

    def forward(self, x, positions):  # x [B, H, L, d], positions [L]
        angles = torch.outer(positions.to(self.freqs.dtype), self.freqs)  # [L, d/2]
        freqs_cis = torch.polar(torch.ones_like(angles), angles)
        x_ = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
        return torch.view_as_real(x_ * freqs_cis).flatten(-2).type_as(x)


ONLY = ("rms_norm", "rope")
LABEL = None

adapter = TorchModuleAdapter(
    "heldout.ok_llama_rms_rope",
    [
        TorchEntry("rms_norm", make=lambda c: RMSNorm(c.d_model), forward=lambda m, x: m(x)),
        TorchEntry(
            "rope",
            make=lambda c: Rotary(c.d_model // c.n_heads),
            forward=lambda m, x, positions: m(x, positions),
            # complex tensors have no float16 / bfloat16 kernels on the CPU
            dtypes=("float64", "float32"),
        ),
    ],
)
