"""An encoder-decoder that adds the sinusoidal table to the source tokens and not to the
target's: the decoder's embedding is the scaled lookup alone (``self.tgt_embed(tgt)`` where
``self.positional_encoding(self.tgt_embed(tgt))`` was meant, a line PyTorch's translation
tutorial writes twice). Every target token is a bag of words to the decoder's
self-attention; the source side is right (SPEC.md §8.1, §2.1)."""

from __future__ import annotations

from torch import Tensor

from tck.reference import CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, seq2seq_entry

BUG_CLASS = "seq2seq_target_without_positions"
EXPECTED_CODES = frozenset({"positional.positions_ignored"})


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
        memory = self.encoder(self.embed(src_ids, src_table), src_keep)
        scale, logit_scale = ref.embedding_scale(self.config.d_model, self.conventions)
        target = self.dropout(tgt_table(tgt_ids) * scale)  # BUG: self.embed(tgt_ids, tgt_table)
        x = self.decoder(target, memory, tgt_keep, src_keep)
        return ref.matmul(x, out_table.T) * logit_scale


adapter = mutant(BUG_CLASS, seq2seq_entry(lambda c: Seq2Seq(c, CANONICAL)))
