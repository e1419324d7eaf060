"""Multi-head attention that splits heads with ``view(B, n_head, L, d)`` straight from
[B, L, D]: no ``view(B, L, n_head, d).transpose(1, 2)``, so each "head" holds pieces of several
positions. The merge (transpose, then view) is the usual one.

Bug source: hyunwoongko/transformer issue #15 (``x.view(batch_size, self.num_heads, seq_len,
d)`` "ruins embedding vectors of the tokens"); reczoo/FuxiCTR issue #30 "MultiHeadAttention bug
when num_heads is greater than 1" (splitting heads without transposing).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_concat = nn.Linear(d_model, d_model)

    def split(self, tensor):
        batch_size, length, d_model = tensor.size()
        d_tensor = d_model // self.n_head
        return tensor.view(batch_size, self.n_head, length, d_tensor)  # the bug

    def concat(self, tensor):
        batch_size, head, length, d_tensor = tensor.size()
        return tensor.transpose(1, 2).contiguous().view(batch_size, length, head * d_tensor)

    def forward(self, q, k, v, mask=None):
        q, k, v = self.split(self.w_q(q)), self.split(self.w_k(k)), self.split(self.w_v(v))
        score = q @ k.transpose(2, 3) / math.sqrt(k.size(-1))
        if mask is not None:
            score = score.masked_fill(mask == 0, float("-inf"))
        out = torch.softmax(score, dim=-1) @ v
        return self.w_concat(self.concat(out))


def forward(m, query, key, value, key_padding=None, causal=False):
    mask = None
    if key_padding is not None:
        mask = key_padding[:, None, None, :]
    if causal:
        n, s = query.shape[1], key.shape[1]
        tril = torch.ones(n, s, dtype=torch.bool, device=query.device).tril()
        mask = tril if mask is None else mask & tril
    return m(query, key, value, mask)


ONLY = ("mha",)
# The split is wrong, not the merge (relabelled from heads_merged_wrong_order, the closest
# code when the set was written, once SPEC named the split: attention.heads_split_wrong_order).
LABEL = "attention.heads_split_wrong_order"

names = {"q": "w_q", "k": "w_k", "v": "w_v", "o": "w_concat"}
adapter = TorchModuleAdapter(
    "heldout.mha_split_without_transpose",
    [
        TorchEntry(
            "mha",
            make=lambda c: MultiHeadAttention(c.d_model, c.n_heads),
            forward=forward,
            param_map={
                f"{k}.{p}": f"{v}.{p}" for k, v in names.items() for p in ("weight", "bias")
            },
            conventions=Conventions(fully_masked_rows="nan"),
        )
    ],
)
