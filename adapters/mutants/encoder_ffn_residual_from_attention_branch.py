"""A pre-LN encoder layer whose feed-forward sublayer adds its output to the attention's
branch output instead of the residual stream: ``a + FFN(LN(h))`` for ``h + FFN(LN(h))``
with ``h = x + a`` (transformers' DeiT layer's ``self.output(layer_output, hidden_states)``
given ``attention_output``), so the layer's input is lost from its output (SPEC.md §7.1)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_ffn_residual_from_attention_branch"
EXPECTED_CODES = frozenset({"blocks.residual_from_layer_input"})


class EncoderLayer(tutorial.EncoderLayer):
    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        mask = self.make_mask(pad_mask, attn_mask)
        n = self.norm1(x)
        a = self.dropout(self.self_attn(n, n, n, mask, causal))
        h = x + a
        return a + self.dropout(self.feed_forward(self.norm2(h)))  # BUG: h + ...


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer, norm_first=True))
