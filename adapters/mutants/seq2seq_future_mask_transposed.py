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

from . import seq2seq_steps
from .tutorial import mutant, seq2seq_entry

BUG_CLASS = "seq2seq_future_mask_transposed"
EXPECTED_CODES = frozenset({"mask.causal_leak", "mask.polarity_inverted"})
TOP_CAUSES = frozenset({"mask.causal_leak"})
DECLARED = dataclasses.replace(CANONICAL, fully_masked_rows="nan")


class Seq2Seq(seq2seq_steps.Seq2Seq):
    def target_keep(self, tgt_ids: Tensor) -> Tensor:
        lt = tgt_ids.shape[-1]
        causal = ref.causal_keep_mask(lt, lt, self.conventions.causal_alignment, tgt_ids.device)
        return self.keep(tgt_ids) & causal.T  # BUG: the triangle transposed


adapter = mutant(BUG_CLASS, seq2seq_entry(lambda c: Seq2Seq(c, DECLARED), conventions=DECLARED))
