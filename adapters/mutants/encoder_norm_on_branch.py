"""A post-LN encoder layer whose attention sublayer normalises its own output before the
residual add, ``x + norm1(attn(x))``, where post-LN is ``norm1(x + attn(x))`` (HF BERT's
``BertSelfOutput`` with ``LayerNorm(hidden_states) + input_tensor`` for
``LayerNorm(hidden_states + input_tensor)``): the FFN sublayer is right, and the residual
stream is never normalised after the attention (SPEC.md §7.1)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_norm_on_branch"
EXPECTED_CODES = frozenset({"blocks.norm_on_branch"})


class EncoderLayer(tutorial.EncoderLayer):
    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        mask = self.make_mask(pad_mask, attn_mask)
        # BUG: self.norm1(x + self.dropout(self.self_attn(...))), the norm inside the add
        x = x + self.norm1(self.dropout(self.self_attn(x, x, x, mask, causal)))
        return self.norm2(x + self.dropout(self.feed_forward(x)))


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
