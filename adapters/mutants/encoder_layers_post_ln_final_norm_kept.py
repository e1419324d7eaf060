"""A pre-LN encoder stack whose layers are built post-LN: a layer constructor's positional
arguments shifted by one (ESPnet's ``EncoderLayer(size, attn, ff, dropout, normalize_before,
concat_after)`` handed ``concat_after`` where ``normalize_before`` belongs), while the stack
keeps the final LayerNorm only a pre-LN stack has (SPEC.md §7.1, §7.3). Two conventions change
at once: each layer normalises after its residual add, and the stack still ends with a norm."""

from __future__ import annotations

import torch.nn as nn

from . import tutorial
from .tutorial import EncoderLayer, LayerNorm, encoder_entry, mutant

BUG_CLASS = "encoder_layers_post_ln_final_norm_kept"
EXPECTED_CODES = frozenset({"blocks.norm_placement_post"})


class Encoder(tutorial.Encoder):
    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, eps: float = 1e-5):
        nn.Module.__init__(self)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, eps=eps, norm_first=False)  # BUG: True
            for _ in range(n_layers)
        )
        self.norm = LayerNorm(d_model, eps)


adapter = mutant(BUG_CLASS, encoder_entry(Encoder))
