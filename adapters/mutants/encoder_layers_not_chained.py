"""An encoder stack whose loop never chains its layers: ``out = layer(x, ...)`` for
``x = layer(x, ...)``, so every layer computes from the stack's input and only the last
layer's output reaches the final norm; the other layers' parameters are loaded and never
matter (SPEC.md §7.3). A one-layer stack is right. Resembles
EndingCredits/Neural-Episodic-Control#3 (a second layer fed the network's input instead of the
first layer's output)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_entry, mutant

BUG_CLASS = "encoder_layers_not_chained"
EXPECTED_CODES = frozenset({"blocks.layers_not_chained"})


class Encoder(tutorial.Encoder):
    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        out = x
        for layer in self.layers:
            out = layer(x, pad_mask, attn_mask, causal)  # BUG: layer(out, ...)
        return self.norm(out)


adapter = mutant(BUG_CLASS, encoder_entry(Encoder))
