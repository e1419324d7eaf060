"""Multi-head attention that keeps q, k and v in flash-attn's ``[B, L, H, d]`` layout and hands
them to ``F.scaled_dot_product_attention``, which reads ``[B, H, L, d]``: without a mask the
positions become the "heads" and the heads the "sequence", so each position attends over its
own heads and nothing else, silently; with the key-padding mask ``[B, 1, 1, Lk]`` the call
raises (the mask no longer broadcasts over ``[B, L, H, H]``). The suite's default calls are
masked, so only the exception shows it there. The same slip as transformers' flash-attention
path fed to the SDPA one (q/k/v ``[B, L, H, d]`` without ``transpose(1, 2)``).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "mha_heads_left_time_major"
EXPECTED_CODES = frozenset({"attention.heads_split_wrong_order"})
# The bug raises on the suite's masked calls by design, so its error rows are the bug's, not
# a broken mutant's (tests/detection/test_detection.py).
RAISES = True


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, lk, h, d_k = q.size(0), q.size(1), k.size(1), self.n_heads, self.d_k
        q = self.w_q(q).view(b, lq, h, d_k)  # BUG: .transpose(1, 2) missing: (B, Lq, H, d_k)
        k = self.w_k(k).view(b, lk, h, d_k)  # BUG
        v = self.w_v(v).view(b, lk, h, d_k)  # BUG
        if mask is not None:
            mask = mask.unsqueeze(1).bool()  # (B, 1, Lq or 1, Lk): True = may attend
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return self.fc(x.reshape(b, lq, h * d_k))  # read back as (B, Lq, H, d_k)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
