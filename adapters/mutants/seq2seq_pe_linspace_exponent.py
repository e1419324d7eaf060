"""An encoder-decoder whose sinusoidal table spaces the frequency exponents with
``torch.linspace(0, 1, d // 2)``, omega_i = base^(-i / (d/2 - 1)), where the paper's
base^(-2i/d) is declared, inside a whole model (the positional op itself is not offered).
The table is geometric with another base, base^(d / (d - 2)); that power of the declared
base at the subject's own d names the exponents spaced over d/2 - 1 steps, not another base.
Resembles the ``linspace``-spaced timescales of tensor2tensor's ``get_timing_signal_1d``
(``log_timescale_increment = log(max / min) / (num_timescales - 1)``) and flax's
``sinusoidal_init`` carried into a model that declares the paper's table.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, seq2seq_entry

BUG_CLASS = "seq2seq_pe_linspace_exponent"
EXPECTED_CODES = frozenset({"positional.frequency_wrong"})


def table(length: int, d: int, base: float) -> Tensor:
    exponents = torch.linspace(0.0, 1.0, d // 2, dtype=torch.float64)  # BUG: i / (d/2 - 1)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * base**-exponents
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # (L, d)


class Seq2Seq(ref.Seq2Seq):
    def embed(self, ids: Tensor, table_: ref.Embedding) -> Tensor:
        c, conv = self.config, self.conventions
        scale, _ = ref.embedding_scale(c.d_model, conv)
        ref.sinusoidal_pe(ids.shape[1], c.d_model, max_len=c.max_len)  # its length check
        pe = table(ids.shape[1], c.d_model, conv.pe_base)
        return self.dropout(table_(ids) * scale + pe.to(table_.weight))


adapter = mutant(BUG_CLASS, seq2seq_entry(lambda c: Seq2Seq(c, CANONICAL)))
