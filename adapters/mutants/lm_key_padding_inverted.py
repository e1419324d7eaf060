"""Causal self-attention on ``nn.MultiheadAttention`` handed the keep-mask (True = token) as
its ``key_padding_mask``, where True means "pad": ``key_padding_mask=keep`` for ``~keep``
(pytorch/pytorch#39321 discusses that convention; mlwithme/TransformerTranslation#2 is a
reader confused by it). The real tokens are hidden and the pads attended. The module zeroes
the rows left without a key after its output projection, so on a right-padded row under the
causal mask every real query comes out 0, a row §4.4 decides; the bug shows on the rows the
spec promises when the pads come first (SPEC.md §4.1, §4.2, §11.7)."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import module_attention_entry
from .tutorial import mutant

BUG_CLASS = "lm_key_padding_inverted"
EXPECTED_CODES = frozenset({"mask.polarity_inverted"})


class Attention(gpt_tutorial.ModuleAttention):
    def padding(self, keep: Tensor) -> Tensor:
        return keep  # BUG: ~keep (True = pad for nn.MultiheadAttention)


adapter = mutant(BUG_CLASS, module_attention_entry(Attention))
