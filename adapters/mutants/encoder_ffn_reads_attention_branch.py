"""A pre-LN encoder layer whose feed-forward sublayer computes its branch from the
attention's branch output instead of the residual stream: ``h + FFN(LN(a))`` for
``h + FFN(LN(h))`` with ``h = x + a`` (``self.layernorm_after(attention_output)`` for
``self.layernorm_after(hidden_states)``), its residual add right (SPEC.md §7.1)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_ffn_reads_attention_branch"
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
        n = self.norm1(x)
        a = self.dropout(self.self_attn(n, n, n, mask, causal))
        h = x + a
        return h + self.dropout(self.feed_forward(self.norm2(a)))  # BUG: self.norm2(h)


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer, norm_first=True))
