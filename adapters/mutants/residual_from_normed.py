"""A pre-LN encoder layer whose residual path starts from the normalised input:
``x = self.norm1(x); x = x + self.self_attn(x, x, x)`` instead of ``x + attn(norm1(x))``.
Cited: lbcb-sci/RiNALMo#9 ("you used the layer norm output of hidden states as residual path
of attention, where in standard transformer implementation, the hidden states before layer
norm is used as residual path"; the authors confirmed the oversight and kept it for their
trained weights), karpathy/minGPT#52 (where the norm sits relative to the residual).
"""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "residual_from_normed"
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
        x = self.norm1(x)  # BUG: the residual now starts from the normalised input
        x = x + self.dropout(self.self_attn(x, x, x, mask, causal))
        x = self.norm2(x)  # BUG
        return x + self.dropout(self.feed_forward(x))


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer, norm_first=True))
