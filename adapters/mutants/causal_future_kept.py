"""The causal mask inverted in a Llama-style attention with a KV cache: ``future_mask``
returns the keys a query may see (``tril``) where the attention expects the ones it must
not (``triu(1)``), so each query sees only the keys after it and loses its own and the past
(SPEC.md §4.3, §4.1). The last token sees no key at all (zeros). Resembles the subsequent
mask compared the wrong way round (``subsequent == 1``) in tutorial encoder-decoders."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "causal_future_kept"
EXPECTED_CODES = frozenset({"mask.polarity_inverted", "mask.causal_leak"})
TOP_CAUSES = frozenset({"mask.polarity_inverted"})


class Attention(gpt_tutorial.Attention):
    def future_mask(self, n: int, t: int, cached: bool) -> Tensor:
        return ~super().future_mask(n, t, cached)  # BUG: the keys to keep, used as hidden


adapter = mutant(BUG_CLASS, attention_entry(Attention))
