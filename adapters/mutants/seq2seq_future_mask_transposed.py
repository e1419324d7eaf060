"""An encoder-decoder whose decoder builds its future mask transposed: ``tril(-inf, -1)`` for
``triu(-inf, 1)`` (fairseq's ``buffered_future_mask`` with the triangle flipped), so each
target query sees itself and the later tokens and loses the earlier ones. A right-padded
target's padded queries then see only padded keys: no key at all, 0 / 0 under the declared
``fully_masked_rows='nan'``, and the NaN spreads through the next layers. The NaN is the
mask's doing, not an overflow (SPEC.md §4.3, §4.4)."""

from __future__ import annotations

import dataclasses

from torch import Tensor

from tck.reference import CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, seq2seq_entry

BUG_CLASS = "seq2seq_future_mask_transposed"
EXPECTED_CODES = frozenset({"mask.causal_leak", "mask.polarity_inverted"})
TOP_CAUSES = frozenset({"mask.causal_leak"})
DECLARED = dataclasses.replace(CANONICAL, fully_masked_rows="nan")


class Seq2Seq(ref.Seq2Seq):
    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        tied = self.config.tie_weights
        src_table = self.embedding if tied else self.src_embedding
        tgt_table = self.embedding if tied else self.tgt_embedding
        out_table = self.embedding.weight if tied else self.generator.weight
        lt = tgt_ids.shape[-1]
        src_keep = self.keep(src_ids)
        causal = ref.causal_keep_mask(lt, lt, self.conventions.causal_alignment, tgt_ids.device)
        tgt_keep = self.keep(tgt_ids) & causal.T  # BUG: the triangle transposed
        memory = self.encoder(self.embed(src_ids, src_table), src_keep)
        _, logit_scale = ref.embedding_scale(self.config.d_model, self.conventions)
        x = self.decoder(self.embed(tgt_ids, tgt_table), memory, tgt_keep, src_keep)
        return ref.matmul(x, out_table.T) * logit_scale


adapter = mutant(BUG_CLASS, seq2seq_entry(lambda c: Seq2Seq(c, DECLARED), conventions=DECLARED))
