"""A pre-LN stack whose final LayerNorm moved into the loop over the layers: ``x =
self.norm(layer(x))`` for each layer, where the norm belongs once after the last (whisper's
``TextDecoder`` keeps ``self.ln`` after its loop; a refactor indented it one level). Every
layer after the first reads a normalised stream, and the residual stream the spec carries
through the stack is lost at each step."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_entry, mutant

BUG_CLASS = "final_norm_every_layer"
EXPECTED_CODES = frozenset({"blocks.final_norm_every_layer"})


class Encoder(tutorial.Encoder):
    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        for layer in self.layers:
            x = self.norm(layer(x, pad_mask, attn_mask, causal))  # BUG: the norm after the loop
        return x


adapter = mutant(BUG_CLASS, encoder_entry(Encoder))
