"""An encoder-decoder that adds the sinusoidal table to the source tokens and not to the
target's: the decoder's embedding is the scaled lookup alone (``self.tgt_embed(tgt)`` where
``self.positional_encoding(self.tgt_embed(tgt))`` was meant, a line PyTorch's translation
tutorial writes twice). Every target token is a bag of words to the decoder's
self-attention; the source side is right (SPEC.md §8.1, §2.1)."""

from __future__ import annotations

from torch import Tensor, nn

from tck.reference import CANONICAL
from tck.reference import model as ref

from . import seq2seq_steps
from .tutorial import mutant, seq2seq_entry

BUG_CLASS = "seq2seq_target_without_positions"
EXPECTED_CODES = frozenset({"positional.positions_ignored"})


class Seq2Seq(seq2seq_steps.Seq2Seq):
    def embed_target(self, tgt_ids: Tensor, table: nn.Module) -> Tensor:
        scale, _ = ref.embedding_scale(self.config.d_model, self.conventions)
        return self.dropout(table(tgt_ids) * scale)  # BUG: self.embed(tgt_ids, table)


adapter = mutant(BUG_CLASS, seq2seq_entry(lambda c: Seq2Seq(c, CANONICAL)))
