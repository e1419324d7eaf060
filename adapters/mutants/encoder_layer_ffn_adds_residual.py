"""A pre-LN encoder layer whose feed-forward sublayer adds the residual stream on the line
that computes its branch and again on the next (fair-esm's ``x = self.fc2(x)`` rewritten
``x = self.fc2(x) + residual`` above ``x = residual + x``): the layer returns 2h + FFN(LN(h))
for h + FFN(LN(h)), the stream counted twice (SPEC.md §7.1)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_layer_ffn_adds_residual"
EXPECTED_CODES = frozenset({"blocks.residual_added_twice"})


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
        x = x + self.dropout(self.self_attn(h, h, h, mask, causal))
        residual = x
        x = self.dropout(self.feed_forward(self.norm2(x))) + residual  # BUG: no + residual
        return residual + x


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer, norm_first=True))
