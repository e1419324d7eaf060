"""An encoder layer ported to a channel-first (NCW) layout, as SqueezeBERT holds its
activations (``[N, C, W]``, convolutions of kernel size 1), whose queries and values are
brought from ``[N, H, d, W]`` to ``[N, H, W, d]`` by a reshape where a permute belongs: each
head's rows read its ``(d, W)`` block in storage order and mix positions with features. The
keys, kept ``[N, H, d, W]`` for the product, are right (SPEC.md §3.3)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_heads_from_channel_first_reshape"
EXPECTED_CODES = frozenset({"attention.heads_split_wrong_order"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def transpose_for_scores(self, x: Tensor) -> Tensor:
        """[N, C, W] -> [N, H, W, d], for the queries and the values."""
        n, _, w = x.shape
        return x.reshape(n, self.n_heads, self.d_k, w).reshape(n, self.n_heads, w, self.d_k)
        # BUG: .permute(0, 1, 3, 2) for the second reshape

    def transpose_key_for_scores(self, x: Tensor) -> Tensor:
        """[N, C, W] -> [N, H, d, W], kept so for q @ k."""
        n, _, w = x.shape
        return x.reshape(n, self.n_heads, self.d_k, w)

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        b, lq, h, d_k = q.size(0), q.size(1), self.n_heads, self.d_k
        q, k, v = (t.transpose(1, 2) for t in (self.w_q(q), self.w_k(k), self.w_v(v)))  # NCW
        q, v = self.transpose_for_scores(q), self.transpose_for_scores(v)
        k = self.transpose_key_for_scores(k).transpose(-1, -2)  # [N, H, W, d] for the oracle's
        if mask is not None:
            mask = mask.unsqueeze(1)
        x = self.attention(q, k, v, mask, causal)
        return self.fc(x.transpose(1, 2).contiguous().view(b, lq, h * d_k))


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
