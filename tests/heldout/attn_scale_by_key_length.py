"""Attention scaled by the last axis of the *transposed* keys: after ``k.transpose(-2, -1)``
that axis is the key length, so scores are divided by sqrt(Lk) instead of sqrt(d_k) (right
only when Lk happens to equal d_k).

Bug source: onlybooks/llm issue #18 (``querys.size(2)`` / ``keys.size(2)`` read the wrong axis
of the attention inputs); Graylab/DL4Proteins-notebooks issue #12 "Attention uses the wrong
scaling dimension".
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


class Attention(nn.Module):
    def forward(self, q, k, v, mask=None):
        k_t = k.transpose(-2, -1)  # [B, H, d_k, Lk]
        scores = q @ k_t / math.sqrt(k_t.size(-1))  # the bug: size(-1) of k_t is Lk
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


def forward(m, q, k, v, keep_mask=None, causal=False):
    if causal:
        tril = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        keep_mask = tril if keep_mask is None else keep_mask & tril
    return m(q, k, v, keep_mask)


ONLY = ("attention",)
LABEL = "attention.scale_wrong"

adapter = TorchModuleAdapter(
    "heldout.attn_scale_by_key_length",
    [
        TorchEntry(
            "attention",
            make=lambda c: Attention(),
            forward=forward,
            conventions=Conventions(fully_masked_rows="nan"),  # masked_fill(-inf)
        )
    ],
)
