"""A pre-LN encoder whose stack runs its layers in reverse order (``for layer in
reversed(self.layers)``, a refactor that meant to walk a list built back to front): the last
layer's weights act on the input first, and every layer position computes with another
layer's parameters (SPEC.md §7.3)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_entry, mutant

BUG_CLASS = "encoder_layers_reversed"
EXPECTED_CODES = frozenset({"blocks.layer_params_wrong"})


class Encoder(tutorial.Encoder):
    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        for layer in reversed(self.layers):  # BUG: self.layers
            x = layer(x, pad_mask, attn_mask, causal)
        return self.norm(x)


adapter = mutant(BUG_CLASS, encoder_entry(Encoder))
