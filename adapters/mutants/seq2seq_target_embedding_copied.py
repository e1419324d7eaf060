"""An encoder-decoder whose target embedding is a copy of the shared table made when the model
is built (``nn.Parameter(src_emb.weight.clone())`` where ``tgt_emb.weight = src_emb.weight``
was meant): loading the checkpoint writes the shared table, read by the source embedding and
the output projection, and the target tokens keep being embedded with the initial values.
The model holds one table more than the spec's tied model (SPEC.md §8.3, §10.3). Resembles
OpenNMT-py's ``share_embeddings`` and fairseq's ``share_all_embeddings`` (three uses of one
matrix), where a port that copies instead of assigning loses one."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tck.reference import CANONICAL

from . import seq2seq_steps
from .tutorial import mutant, seq2seq_entry

BUG_CLASS = "seq2seq_target_embedding_copied"
EXPECTED_CODES = frozenset({"model.embedding_not_tied"})


class Seq2Seq(seq2seq_steps.Seq2Seq):
    def __init__(self, config, conventions) -> None:  # type: ignore[no-untyped-def]
        super().__init__(config, conventions)
        # BUG: a copy of the shared table, not the table itself
        with torch.no_grad():
            self.tgt_copy = nn.Embedding.from_pretrained(
                self.embedding.weight.detach().clone(),
                freeze=False,
                padding_idx=config.padding_idx,
            )

    def embed_target(self, tgt_ids: Tensor, table: nn.Module) -> Tensor:
        return self.embed(tgt_ids, self.tgt_copy)  # the copy, never loaded


adapter = mutant(BUG_CLASS, seq2seq_entry(lambda c: Seq2Seq(c, CANONICAL)))
