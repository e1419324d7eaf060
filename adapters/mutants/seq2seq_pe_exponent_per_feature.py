"""An encoder-decoder whose sinusoidal table takes its exponent per feature, ``pos /
10000 ** (j / d)`` for every column j, instead of per pair, ``2 * (j // 2) / d``: the sines
are right and each cosine turns at the next pair's frequency. The table of HF's Marian and
BART files (``position_enc = [[pos / np.power(10000, 2 * (j // 2) / dim) ...]]``) with the
``2 * (j // 2)`` simplified away; sines in the even columns, cosines in the odd ones.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tck.reference import CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, seq2seq_entry

BUG_CLASS = "seq2seq_pe_exponent_per_feature"
EXPECTED_CODES = frozenset({"positional.frequency_wrong"})


def table(length: int, d: int, base: float) -> Tensor:
    j = torch.arange(d, dtype=torch.float64)
    angles = torch.arange(length, dtype=torch.float64)[:, None] / base ** (j / d)  # BUG: j // 2
    pe = torch.empty(length, d, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = angles[:, 0::2].sin(), angles[:, 1::2].cos()
    return pe


class Seq2Seq(ref.Seq2Seq):
    def embed(self, ids: Tensor, table_: ref.Embedding) -> Tensor:
        c, conv = self.config, self.conventions
        scale, _ = ref.embedding_scale(c.d_model, conv)
        ref.sinusoidal_pe(ids.shape[1], c.d_model, max_len=c.max_len)  # its length check
        pe = table(ids.shape[1], c.d_model, conv.pe_base)
        return self.dropout(table_(ids) * scale + pe.to(table_.weight))


adapter = mutant(BUG_CLASS, seq2seq_entry(lambda c: Seq2Seq(c, CANONICAL)))
