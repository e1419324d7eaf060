"""A sinusoidal table kept in a float16 buffer (``self.pe.half()``, to save memory or to
match a mixed-precision model) inside a model run in float32 or float64: the table is off by
float16's rounding, about 5e-4. The precision retry of a float64 subject knows float32 only;
this is the same class of bug one dtype lower. Cited (the class): facebookresearch/fairseq2#65
("Compute positional encoding always in fp32").
"""

from __future__ import annotations

from . import tutorial
from .tutorial import mutant, pe_entry

BUG_CLASS = "pe_float16_table"
EXPECTED_CODES = frozenset({"numerics.table_low_precision"})


class PositionalEncoding(tutorial.PositionalEncoding):
    def __init__(self, d_model: int, max_len: int = 5000):
        super().__init__(d_model, max_len)
        self.register_buffer("pe", self.pe.half())  # BUG: the table kept as float16


adapter = mutant(BUG_CLASS, pe_entry(PositionalEncoding))
