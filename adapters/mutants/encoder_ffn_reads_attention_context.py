"""A post-LN encoder layer whose feed-forward sublayer is handed the attention's merged
context before the output projection (SqueezeBERT's ``context_layer`` where the attention
sublayer's output belongs, a variable of the right width picked from the wrong line), its
residual add right: out = Norm(h + FFN(c)), h the attention sublayer's output, c its heads
merged before W_o (SPEC.md §7.1)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_ffn_reads_attention_context"
EXPECTED_CODES = frozenset({"blocks.branch_from_layer_input"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    context: Tensor | None = None  # the heads merged, before the output projection

    def merge_heads(self, x: Tensor) -> Tensor:
        self.context = super().merge_heads(x)
        return self.context


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention

    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        mask = self.make_mask(pad_mask, attn_mask)
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask, causal)))
        context = self.self_attn.context
        return self.norm2(x + self.dropout(self.feed_forward(context)))  # BUG: (x)


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
