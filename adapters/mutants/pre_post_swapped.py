"""Pre-LN computed where post-LN is declared: each sublayer is x + f(Norm(x)) while the
adapter (and the paper it cites) promise Norm(x + f(x))."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "pre_post_swapped"
EXPECTED_CODES = frozenset({"blocks.norm_placement_pre"})


class EncoderLayer(tutorial.EncoderLayer):
    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        mask = self.make_mask(pad_mask, attn_mask)
        h = self.norm1(x)  # BUG: pre-LN; the adapter declares norm_placement="post"
        x = x + self.dropout(self.self_attn(h, h, h, mask, causal))
        return x + self.dropout(self.feed_forward(self.norm2(x)))


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer, norm_first=False))
