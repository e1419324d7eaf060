"""A pre-LN encoder layer whose FFN sublayer alone takes its residual from the normalised
input (``x = self.norm2(x); x = x + ffn(x)``) while the attention sublayer is right: the
residual bug of ``residual_from_normed`` in one sublayer only. Resembles: lbcb-sci/RiNALMo#9
(the layer-norm output used as the residual path), where a port fixes one sublayer and
not the other.
"""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "residual_from_normed_ffn"
EXPECTED_CODES = frozenset({"blocks.residual_after_norm"})


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
        x = self.norm2(x)  # BUG: the FFN's residual now starts from the normalised input
        return x + self.dropout(self.feed_forward(x))


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer, norm_first=True))
