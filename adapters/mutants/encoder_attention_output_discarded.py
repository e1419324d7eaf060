"""A post-LN encoder layer whose feed-forward sublayer is fed the layer's input, as its
input and as its residual (``x = norm2(x + ffn(x))`` written after
``h = norm1(x + attn(x))`` with the result of the first line never used): the attention
sublayer is computed and discarded (SPEC.md §7.1). Resembles transformers' ELECTRA layer
with ``feed_forward_chunk`` handed ``hidden_states`` instead of ``attention_output``."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_attention_output_discarded"
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
        h = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask, causal)))  # noqa: F841
        return self.norm2(x + self.dropout(self.feed_forward(x)))  # BUG: h, not x, twice


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
