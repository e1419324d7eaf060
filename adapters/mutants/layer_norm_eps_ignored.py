"""LayerNorm eps taken from the wrong place: the constructor's eps (1e-5, declared) is
ignored for a hard-coded BERT-style ``variance_epsilon = 1e-12``."""

from __future__ import annotations

from . import tutorial
from .tutorial import encoder_layer_entry, layer_norm_entry, mutant

BUG_CLASS = "layer_norm_eps_ignored"
EXPECTED_CODES = frozenset({"layer_norm.eps_wrong"})


class LayerNorm(tutorial.LayerNorm):
    def __init__(self, features: int, eps: float = 1e-5):
        super().__init__(features, eps)
        self.eps = 1e-12  # BUG: the eps argument is never used


class EncoderLayer(tutorial.EncoderLayer):
    norm_class = LayerNorm


adapter = mutant(BUG_CLASS, layer_norm_entry(LayerNorm), encoder_layer_entry(EncoderLayer))
