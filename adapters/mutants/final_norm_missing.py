"""Final LayerNorm missing in a pre-LN stack: ``self.norm`` is built (and loaded from the
checkpoint) but never applied, so the stack returns the un-normalised residual stream."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_entry, mutant

BUG_CLASS = "final_norm_missing"
EXPECTED_CODES = frozenset({"blocks.final_norm_missing"})


class Encoder(tutorial.Encoder):
    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        for layer in self.layers:
            x = layer(x, pad_mask, attn_mask, causal)
        return x  # BUG: not self.norm(x)


adapter = mutant(BUG_CLASS, encoder_entry(Encoder))
