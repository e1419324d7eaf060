"""An encoder stack whose loop stops one layer short: ``for layer in self.layers[:-1]``
(an off-by-one depth, or a loop written to leave the last block to a head that never runs
it): the last layer's parameters are loaded and never reach the output (SPEC.md §7.3, §0.2).
A one-layer stack is the final norm alone."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_entry, mutant

BUG_CLASS = "encoder_last_layer_skipped"
EXPECTED_CODES = frozenset({"params.unused"})


class Encoder(tutorial.Encoder):
    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        for layer in self.layers[:-1]:  # BUG: self.layers
            x = layer(x, pad_mask, attn_mask, causal)
        return self.norm(x)


adapter = mutant(BUG_CLASS, encoder_entry(Encoder))
