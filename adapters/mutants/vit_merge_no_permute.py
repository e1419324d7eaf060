"""A ViT whose attention merges its heads with a reshape and no permute: the (B, H, N, d)
output of attention is reshaped straight to (B, N, H*d), which mixes chunks of different
tokens into each token's output before the projection. Cited:
jsbaan/transformer-from-scratch#6 ("a critical bug ... a missing permute before a reshape in
multi-head attention ... PyTorch's row-major reshape mixes chunks from different sequence
positions into the same token's output embedding"; training on an easy task still passed),
hackiey/QAnet-pytorch#2 (``heads.view(batch_size, l, -1)`` without ``permute``: invisible
with one head), jadore801120/attention-is-all-you-need-pytorch#7.
"""

from __future__ import annotations

from torch import Tensor

from tck.reference import VIT_CANONICAL, Config
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_merge_no_permute"
EXPECTED_CODES = frozenset({"attention.heads_merged_wrong_order"})


class MultiHeadAttention(ref.MultiHeadAttention):
    def forward(
        self, query: Tensor, key: Tensor, value: Tensor, keep_mask: Tensor | None = None
    ) -> Tensor:
        (b, lq, _), lk, h = query.shape, key.shape[1], self.n_heads
        q = self.q(query).view(b, lq, h, self.d_k).transpose(1, 2)
        k = self.k(key).view(b, lk, h, self.d_k).transpose(1, 2)
        v = self.v(value).view(b, lk, h, self.d_v).transpose(1, 2)
        heads = ref.scaled_dot_product_attention(
            q, k, v, keep_mask, fully_masked_rows=self.fully_masked_rows
        )  # (B, H, N, d_v)
        heads = heads.reshape(b, lq, h * self.d_v)  # BUG: no transpose(1, 2) first
        return self.o(heads)


def make(c: Config) -> ref.ViT:
    vit = ref.ViT(c, VIT_CANONICAL)
    for layer in vit.encoder.layers:
        layer.self_attn.__class__ = MultiHeadAttention  # the same parameters, the buggy merge
    return vit


adapter = mutant(BUG_CLASS, vit_entry(make))
