"""A pre-LN encoder-decoder whose encoder stack ends without its final norm while the
decoder's keeps it: the memory every cross-attention reads is the last encoder layer's raw
residual stream (SPEC.md §7.3: a pre-LN stack ends with a norm). A port that builds the
final norm in the stack's ``__init__`` but returns the loop's output, or that moves the norm
into the decoder only, gives this (fairseq's ``encoder_normalize_before`` and
``decoder_normalize_before`` are separate switches)."""

from __future__ import annotations

import dataclasses

from torch import Tensor

from tck.reference import CANONICAL
from tck.reference import model as ref

from .tutorial import mutant, seq2seq_entry

BUG_CLASS = "seq2seq_encoder_final_norm_missing"
EXPECTED_CODES = frozenset({"blocks.final_norm_missing"})
PRE_LN = dataclasses.replace(CANONICAL, norm_placement="pre")


class Encoder(ref.Encoder):
    def forward(self, x: Tensor, keep_mask: Tensor | None = None) -> Tensor:
        for layer in self.layers:
            x = layer(x, keep_mask)
        return x  # BUG: self.norm(x)


class Seq2Seq(ref.Seq2Seq):
    def __init__(self, config: ref.Config, conventions: ref.Conventions) -> None:
        super().__init__(config, conventions)
        norm = self.encoder.norm
        self.encoder = Encoder(config, conventions)
        self.encoder.norm = norm


adapter = mutant(
    BUG_CLASS,
    dataclasses.replace(seq2seq_entry(lambda c: Seq2Seq(c, PRE_LN)), conventions=PRE_LN),
)
