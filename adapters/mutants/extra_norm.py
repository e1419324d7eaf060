"""An extra LayerNorm the forward never uses (a leftover of a refactor): the outputs are
right, and the layer holds 2*D parameters the spec does not have, which ``params()`` does not
show. Only the parameter count (SPEC.md §10.3), taken from the module itself, sees it."""

from __future__ import annotations

from typing import Any

from torch import nn

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "extra_norm"
EXPECTED_CODES = frozenset({"params.count_wrong"})


class EncoderLayer(tutorial.EncoderLayer):
    def __init__(self, d_model: int, *args: Any, **kwargs: Any):
        super().__init__(d_model, *args, **kwargs)
        self.norm3 = nn.LayerNorm(d_model)  # BUG: held, counted, never used


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
