"""An encoder-decoder that reads its sinusoidal table at position p + 2: BART's learned
position embedding keeps an offset of 2 (``self.offset = 2``, for its padding id), and a port
to a sinusoidal model carried the offset over (``positions = arange(L) + self.offset``). The
table itself is right; every token gets the encoding of the token two places later.
"""

from __future__ import annotations

from torch import Tensor

from tck.reference import CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, seq2seq_entry

BUG_CLASS = "seq2seq_pe_offset_two"
EXPECTED_CODES = frozenset({"positional.position_offset"})
OFFSET = 2


class Seq2Seq(ref.Seq2Seq):
    def embed(self, ids: Tensor, table_: ref.Embedding) -> Tensor:
        c, conv = self.config, self.conventions
        scale, _ = ref.embedding_scale(c.d_model, conv)
        length = ids.shape[1]
        ref.sinusoidal_pe(length, c.d_model, max_len=c.max_len)  # its length check
        pe = ref.sinusoidal_pe(length + OFFSET, c.d_model, conv.pe_base, conv.pe_layout)
        return self.dropout(table_(ids) * scale + pe[OFFSET:].to(table_.weight))  # BUG: + 2


adapter = mutant(BUG_CLASS, seq2seq_entry(lambda c: Seq2Seq(c, CANONICAL)))
