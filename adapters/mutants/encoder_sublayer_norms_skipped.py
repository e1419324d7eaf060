"""A pre-LN encoder layer that applies none of its sublayer norms: ``x + attn(x)`` and
``x + ffn(x)`` for ``x + attn(norm1(x))`` and ``x + ffn(norm2(x))``, as a ``pre_norm``
switch turned off in a layer that then puts no norm after the residual add either
(x-transformers' ``AttentionLayers(pre_norm=False)`` without its post-branch norm). The
norms' gains are loaded and never act; the stream grows with depth (SPEC.md §7.1)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_sublayer_norms_skipped"
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
        x = x + self.dropout(self.self_attn(x, x, x, mask, causal))  # BUG: norm1(x)
        return x + self.dropout(self.feed_forward(x))  # BUG: norm2(x)


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer, norm_first=True))
