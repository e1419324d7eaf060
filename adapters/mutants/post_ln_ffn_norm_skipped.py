"""A post-LN encoder layer whose feed-forward sublayer returns its residual sum without the
norm: keras-hub's ``TransformerEncoder`` with its ``if not self.normalize_first:`` branch of
the feed-forward sublayer inverted, so ``x + ffn(x)`` where ``Norm(x + ffn(x))`` belongs while
the attention sublayer keeps its post-norm (SPEC.md §7.1)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "post_ln_ffn_norm_skipped"
EXPECTED_CODES = frozenset({"blocks.norm_bypassed"})


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
        return x + self.dropout(self.feed_forward(x))  # BUG: self.norm2(...) not applied


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
