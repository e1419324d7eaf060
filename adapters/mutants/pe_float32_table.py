"""A sinusoidal table computed in float64 and kept in a float32 buffer: the tutorial's
``register_buffer("pe", pe.unsqueeze(0))`` after building ``pe`` in double, but stored with
``.float()`` (the model's default dtype), so a model moved to float64 carries a table rounded
to float32 (about 3e-8 off). The frequencies and the layout are right; only the precision is
lost, and it does not say so: an undeclared float32 island (SPEC.md §10.12), one finding for
the subject, its other checks judged at the island bound. Cited: facebookresearch/fairseq2#65
("Compute positional encoding always in fp32"),
wfondrie/depthcharge#82 (sinusoidal terms kept at a lower precision than the model's).
"""

from __future__ import annotations

from . import tutorial
from .tutorial import mutant, pe_entry

BUG_CLASS = "pe_float32_table"
EXPECTED_CODES = frozenset({"numerics.float32_island"})


class PositionalEncoding(tutorial.PositionalEncoding):
    def __init__(self, d_model: int, max_len: int = 5000):
        super().__init__(d_model, max_len)
        self.register_buffer("pe", self.pe.float())  # BUG: the float64 table kept as float32


adapter = mutant(BUG_CLASS, pe_entry(PositionalEncoding))
