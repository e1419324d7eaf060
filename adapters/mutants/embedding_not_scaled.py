"""Embeddings not scaled by sqrt(d_model) while the adapter declares the paper's scaling
(embedding_scale='emb'): token vectors are added to the positional encoding as they are
(seeds 002 and 003)."""

from __future__ import annotations

from torch import Tensor

from tck.reference import CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, seq2seq_entry

BUG_CLASS = "embedding_not_scaled"
EXPECTED_CODES = frozenset({"embedding.scale_missing"})


class Seq2Seq(ref.Seq2Seq):
    def embed(self, ids: Tensor, table: ref.Embedding) -> Tensor:
        c, conv = self.config, self.conventions
        pe = ref.sinusoidal_pe(ids.shape[1], c.d_model, conv.pe_base, conv.pe_layout, c.max_len)
        return self.dropout(table(ids) + pe.to(table.weight))  # BUG: no * sqrt(d_model)


adapter = mutant(BUG_CLASS, seq2seq_entry(lambda c: Seq2Seq(c, CANONICAL)))
