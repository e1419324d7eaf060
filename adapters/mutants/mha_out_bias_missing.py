"""Multi-head attention whose output projection is built without a bias although the config
gives every attention projection one (``nn.Linear(d, d, bias=False)`` for the ``fc`` layer,
a ``bias=config.attention_bias`` read from the wrong field): the canonical ``o.bias`` has
nowhere to go, and the module computes without it (SPEC.md §0.2, §3.4). Resembles a port
that drops ``out_proj``'s bias (BART's ``bias=True`` on every projection)."""

from __future__ import annotations

from torch import nn

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "mha_out_bias_missing"
EXPECTED_CODES = frozenset({"params.count_wrong", "params.names_differ"})
# every check that loads the canonical parameters raises (params.names_differ): the module
# has no slot for o.bias; the parameter count fails
RAISES = True


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.1):
        super().__init__(d_model, n_heads, dropout)
        self.fc = nn.Linear(d_model, d_model, bias=False)  # BUG: the config has the bias


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
