"""GPT-style causal self-attention whose mask is built with ``torch.triu(..., diagonal=0)``:
the diagonal is masked too, so a token cannot attend to itself and the first token attends to
nothing (NaN after the softmax).

Bug source: pbloem/former issue #10 "Issue with masking" (``triu_indices`` with offset 0: "an
offset of 0 will create a row of all -inf, which gives a complete row of NaNs"; the offset
should be 1); pytorch/tutorials issue #2250 on the diagonal of the subsequent mask.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import Chunk, TorchEntry, TorchModuleAdapter


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        # the bug: diagonal=0 hides the diagonal as well as the future
        future = torch.triu(torch.ones(T, T, device=x.device), diagonal=0).bool()
        att = att.masked_fill(future, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


ONLY = ("causal_self_attention",)
LABEL = "mask.causal_diagonal_hidden"

param_map = {"o.weight": "c_proj.weight", "o.bias": "c_proj.bias"}
for p in ("weight", "bias"):
    param_map |= {f"{n}.{p}": Chunk(f"c_attn.{p}", i, 3) for i, n in enumerate("qkv")}
adapter = TorchModuleAdapter(
    "heldout.gpt_causal_triu_diagonal",
    [
        TorchEntry(
            "causal_self_attention",
            make=lambda c: CausalSelfAttention(c.d_model, c.n_heads),
            forward=lambda m, x: m(x),
            param_map=param_map,
        )
    ],
)
