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
from tck.reference import model as ref

from .tutorial import mutant, seq2seq_entry

BUG_CLASS = "seq2seq_target_embedding_copied"
EXPECTED_CODES = frozenset({"model.embedding_not_tied"})


class Seq2Seq(ref.Seq2Seq):
    def __init__(self, config, conventions) -> None:  # type: ignore[no-untyped-def]
        super().__init__(config, conventions)
        # BUG: a copy of the shared table, not the table itself
        with torch.no_grad():
            self.tgt_copy = nn.Embedding.from_pretrained(
                self.embedding.weight.detach().clone(),
                freeze=False,
                padding_idx=config.padding_idx,
            )

    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        lt = tgt_ids.shape[-1]
        src_keep = self.keep(src_ids)
        causal = ref.causal_keep_mask(lt, lt, self.conventions.causal_alignment, tgt_ids.device)
        tgt_keep = self.keep(tgt_ids) & causal
        memory = self.encoder(self.embed(src_ids, self.embedding), src_keep)
        _, logit_scale = ref.embedding_scale(self.config.d_model, self.conventions)
        x = self.decoder(self.embed(tgt_ids, self.tgt_copy), memory, tgt_keep, src_keep)
        return ref.matmul(x, self.embedding.weight.T) * logit_scale


adapter = mutant(BUG_CLASS, seq2seq_entry(lambda c: Seq2Seq(c, CANONICAL)))
