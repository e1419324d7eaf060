"""A post-LN encoder layer ported from BERT with BERT's LayerNorm eps 1e-12 kept while the
port declares (and its other subjects use) PyTorch's 1e-5. Cited: emonosuke/emoASR#13
("Layernorm eps 1e-12 -> 1e-5"), huggingface/transformers#585 ("ERNIE uses eps=1e-5 instead
of 1e-12": the epsilon made configurable), OpenNMT/CTranslate2#951 ("Align the layer norm
epsilon value with PyTorch").
"""

from __future__ import annotations

from typing import Any

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "bert_eps_ported"
EXPECTED_CODES = frozenset({"layer_norm.eps_wrong"})


class EncoderLayer(tutorial.EncoderLayer):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, **kw: Any) -> None:
        kw["eps"] = 1e-12  # BUG: BERT's eps; the port declares PyTorch's 1e-5
        super().__init__(d_model, n_heads, d_ff, **kw)


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
