"""A pre-LN encoder layer whose FFN sublayer computes its branch from the layer's input
instead of the attention sublayer's output, while its residual add is right:
``h + ffn(norm2(x))`` where ``h + ffn(norm2(h))`` belongs, ``h = x + attn(norm1(x))``
(SPEC.md §7.1). A rename that reuses the layer's input variable in the second sublayer
gives this: the attention's output reaches the stream but never the FFN."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_ffn_reads_layer_input"
EXPECTED_CODES = frozenset({"blocks.branch_from_layer_input"})


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
        out = x + self.dropout(self.self_attn(h, h, h, mask, causal))
        return out + self.dropout(self.feed_forward(self.norm2(x)))  # BUG: norm2(out)


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer, norm_first=True))
