"""A pre-LN encoder layer whose attention norm reaches the queries only: the keys and values
are projected from the sublayer's input before the norm, ``self_attn(norm1(x), x, x)``
where the branch is ``self_attn(h, h, h)`` with ``h = norm1(x)`` (SPEC.md §7.1). A refactor
that keeps ``x`` for the keys and values of ``nn.MultiheadAttention(query, key, value)``
gives this; the FFN sublayer is right. Without the norm the keys and values scale with the
residual stream, which grows with depth."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_norm_keys_values_bypassed"
EXPECTED_CODES = frozenset({"blocks.norm_bypassed"})


class EncoderLayer(tutorial.EncoderLayer):
    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        mask = self.make_mask(pad_mask, attn_mask)
        h = self.norm1(x)
        x = x + self.dropout(self.self_attn(h, x, x, mask, causal))  # BUG: (h, h, h)
        return x + self.dropout(self.feed_forward(self.norm2(x)))


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer, norm_first=True))
