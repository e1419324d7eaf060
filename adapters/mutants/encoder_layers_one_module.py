"""An encoder stack built as ``nn.ModuleList([layer] * n)``: the list holds one layer object n
times, so every layer shares one set of parameters (the shallow-clone bug of a ``clones``
helper that skips ``copy.deepcopy``). Loading layer i's weights overwrites every layer's, so
the stack runs the last layer's weights n times and reads back what it did not load.
"""

from __future__ import annotations

from torch import nn

from . import tutorial
from .tutorial import encoder_entry, mutant

BUG_CLASS = "encoder_layers_one_module"
EXPECTED_CODES = frozenset(
    {"blocks.layer_params_wrong", "params.round_trip_changed", "params.count_wrong"}
)


class Encoder(tutorial.Encoder):
    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, eps: float = 1e-5):
        super().__init__(n_layers, d_model, n_heads, d_ff, eps)
        layer = tutorial.EncoderLayer(d_model, n_heads, d_ff, eps=eps, norm_first=True)
        self.layers = nn.ModuleList([layer] * n_layers)  # BUG: one module, n_layers times


adapter = mutant(BUG_CLASS, encoder_entry(Encoder))
