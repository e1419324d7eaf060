"""An encoder-decoder that scales its target embeddings by sqrt(d_model) and not its source
embeddings: fairseq's encoder with ``x = embed = self.embed_tokens(src_tokens)`` where
``self.embed_scale * self.embed_tokens(src_tokens)`` belongs, the decoder's line right. The
source vectors are sqrt(d_model) times too small beside the sinusoidal table (SPEC.md §1.2,
§8.1)."""

from __future__ import annotations

from torch import Tensor

from tck.reference import CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, seq2seq_entry

BUG_CLASS = "seq2seq_source_not_scaled"
EXPECTED_CODES = frozenset({"embedding.scale_missing"})


class Seq2Seq(ref.Seq2Seq):
    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        tied = self.config.tie_weights
        src_table = self.embedding if tied else self.src_embedding
        tgt_table = self.embedding if tied else self.tgt_embedding
        out_table = self.embedding.weight if tied else self.generator.weight
        lt = tgt_ids.shape[-1]
        src_keep = self.keep(src_ids)
        causal = ref.causal_keep_mask(lt, lt, self.conventions.causal_alignment, tgt_ids.device)
        tgt_keep = self.keep(tgt_ids) & causal
        pe = ref.sinusoidal_pe(
            src_ids.shape[1],
            self.config.d_model,
            self.conventions.pe_base,
            self.conventions.pe_layout,
            self.config.max_len,
        )
        source = self.dropout(src_table(src_ids) + pe.to(src_table.weight))  # BUG: no scale
        memory = self.encoder(source, src_keep)
        _, logit_scale = ref.embedding_scale(self.config.d_model, self.conventions)
        x = self.decoder(self.embed(tgt_ids, tgt_table), memory, tgt_keep, src_keep)
        return ref.matmul(x, out_table.T) * logit_scale


adapter = mutant(BUG_CLASS, seq2seq_entry(lambda c: Seq2Seq(c, CANONICAL)))
