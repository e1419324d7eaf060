"""Residual connection missing in one sublayer: the feed-forward sublayer computes
Norm(f(x)) instead of Norm(x + f(x))."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "residual_missing"
EXPECTED_CODES = frozenset({"blocks.residual_missing"})


class EncoderLayer(tutorial.EncoderLayer):
    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        mask = self.make_mask(pad_mask, attn_mask)
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask, causal)))
        return self.norm2(self.dropout(self.feed_forward(x)))  # BUG: no `x +`


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
