"""Scaled dot-product attention with ``F.softmax(scores, dim=1)``: on [B, H, Lq, Lk] scores
axis 1 is the head axis, so each weight is normalised across heads, not across keys.

Bug source: FudanNLP/fastNLP issue #254 (DotAttention's softmax "should be dim=-1, otherwise it
is wrong for four-dimensional inputs"); labmlai/annotated_deep_learning_paper_implementations
issue #146 (softmax over the wrong einsum axis: "a typo and a big bug").
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


class ScaledDotProductAttention(nn.Module):
    def forward(self, q, k, v, mask=None):
        d_k = q.size(-1)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        p_attn = F.softmax(scores, dim=1)  # the bug: dim=1 is the head axis
        return torch.matmul(p_attn, v)


def forward(m, q, k, v, keep_mask=None, causal=False):
    if causal:
        tril = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        keep_mask = tril if keep_mask is None else keep_mask & tril
    return m(q, k, v, keep_mask)


ONLY = ("attention",)
LABEL = "attention.softmax_axis_wrong"

adapter = TorchModuleAdapter(
    "heldout.attn_softmax_over_heads",
    [
        TorchEntry(
            "attention",
            make=lambda c: ScaledDotProductAttention(),
            forward=forward,
            # masked_fill(-1e9): a query with no key attends uniformly
            conventions=Conventions(fully_masked_rows="uniform"),
            dtypes=("float64", "float32"),  # -1e9 does not fit in float16
        )
    ],
)
