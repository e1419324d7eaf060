"""An encoder-decoder that scales its target embeddings by sqrt(d_model) and not its source
embeddings: fairseq's encoder with ``x = embed = self.embed_tokens(src_tokens)`` where
``self.embed_scale * self.embed_tokens(src_tokens)`` belongs, the decoder's line right. The
source vectors are sqrt(d_model) times too small beside the sinusoidal table (SPEC.md §1.2,
§8.1)."""

from __future__ import annotations

from torch import Tensor, nn

from tck.reference import CANONICAL
from tck.reference import model as ref

from . import seq2seq_steps
from .tutorial import mutant, seq2seq_entry

BUG_CLASS = "seq2seq_source_not_scaled"
EXPECTED_CODES = frozenset({"embedding.scale_missing"})


class Seq2Seq(seq2seq_steps.Seq2Seq):
    def embed_source(self, src_ids: Tensor, table: nn.Module) -> Tensor:
        c, conv = self.config, self.conventions
        pe = ref.sinusoidal_pe(src_ids.shape[1], c.d_model, conv.pe_base, conv.pe_layout, c.max_len)
        return self.dropout(table(src_ids) + pe.to(table.weight))  # BUG: table(ids) * scale


adapter = mutant(BUG_CLASS, seq2seq_entry(lambda c: Seq2Seq(c, CANONICAL)))
