"""Heads folded into the batch in fairseq's time-first layout, the queries without the
transpose: the attention works on ``[L, B, D]`` activations and folds the heads into the
batch, ``q.view(L, B * H, d).transpose(0, 1)`` -> ``[B * H, L, d]``; the buggy line views
the time-first queries straight as ``[B * H, L, d]``, so a "head" of batch row b holds
channels of other positions *and of other batch rows*. The keys and values are folded
correctly, so every shape fits; with one sequence in the batch the bug is the plain
no-transpose split, with several the rows of the batch interact (SPEC.md §3.3, §10.2).
Cited: the time-first layout and its folding are fairseq's ``MultiheadAttention`` (and
``torch.nn.functional.multi_head_attention_forward``'s); facebookresearch/fairseq#1544
(shape questions on ``view(tgt_len, bsz * num_heads, head_dim).transpose(0, 1)``);
reczoo/FuxiCTR#30 (the batch-first form of the same missing transpose).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mha_entry, mutant

BUG_CLASS = "heads_folded_time_first"
EXPECTED_CODES = frozenset({"attention.heads_split_wrong_order"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, lk, h, d_k = q.size(0), q.size(1), k.size(1), self.n_heads, self.d_k
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # time-first [L, B, D]
        q = (
            self.w_q(q).contiguous().view(b * h, lq, d_k)
        )  # BUG: view(lq, b * h, d_k).transpose(0, 1)
        k = self.w_k(k).contiguous().view(lk, b * h, d_k).transpose(0, 1)
        v = self.w_v(v).contiguous().view(lk, b * h, d_k).transpose(0, 1)
        scores = torch.bmm(q, k.transpose(1, 2)) / self.attention.temperature  # [B*H, Lq, Lk]
        scores = scores.view(b, h, lq, lk)
        if causal:
            future = torch.ones(lq, lk, dtype=torch.bool, device=scores.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        if mask is not None:  # (B, Lq or 1, Lk), 1 = may attend
            scores = scores.masked_fill(mask.unsqueeze(1) == 0, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0).view(b * h, lq, lk)
        x = torch.bmm(self.attention.dropout(weights), v)  # [B*H, Lq, d]
        x = x.transpose(0, 1).contiguous().view(lq, b, h * d_k).transpose(0, 1)
        return self.fc(x)


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention), encoder_layer_entry(EncoderLayer))
