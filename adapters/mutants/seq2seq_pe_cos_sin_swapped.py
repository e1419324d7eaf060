"""An encoder-decoder whose sinusoidal table stacks ``[cos, sin]`` for ``[sin, cos]``: the
even dimensions carry cosines and the odd ones sines (the order of a hand-written
``torch.stack`` flipped), inside a whole model whose positional op is not offered.
Resembles the cos-first tables of some ports (OpenNMT-py's ``PositionalEncoding`` writes
sin then cos; a copy that swaps the two lines gives this).
"""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, seq2seq_entry

BUG_CLASS = "seq2seq_pe_cos_sin_swapped"
EXPECTED_CODES = frozenset({"positional.sin_cos_swapped"})


def table(length: int, d: int, base: float) -> Tensor:
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * omega
    return torch.stack([angles.cos(), angles.sin()], dim=-1).flatten(-2)  # BUG: cos first


class Seq2Seq(ref.Seq2Seq):
    def embed(self, ids: Tensor, table_: ref.Embedding) -> Tensor:
        c, conv = self.config, self.conventions
        scale, _ = ref.embedding_scale(c.d_model, conv)
        ref.sinusoidal_pe(ids.shape[1], c.d_model, max_len=c.max_len)  # its length check
        pe = table(ids.shape[1], c.d_model, conv.pe_base)
        return self.dropout(table_(ids) * scale + pe.to(table_.weight))


adapter = mutant(BUG_CLASS, seq2seq_entry(lambda c: Seq2Seq(c, CANONICAL)))
