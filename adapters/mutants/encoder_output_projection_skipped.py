"""An encoder layer whose attention leaves out its output projection: the merged heads go
to the residual add as they are (``return context`` for ``return self.fc(context)``, a
refactor that moved the projection out and forgot it), so the projection's weight and bias
are loaded and never applied (SPEC.md §3.4, §0.2)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "encoder_output_projection_skipped"
EXPECTED_CODES = frozenset({"params.unused"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def output(self, x: Tensor) -> Tensor:
        return x  # BUG: self.fc(x)


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
