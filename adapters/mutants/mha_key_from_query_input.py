"""The key projection applied to the query input: ``k = self.to_k(x)`` for
``self.to_k(context)``, a line kept from the self-attention path in a module that also serves
cross-attention (x-transformers' ``Attention`` takes ``context``). Self-attention passes one
tensor for all three, so only a call with distinct query and key inputs shows it (SPEC.md
§3.4, §3.5). Where the query and key lengths differ the real line raises (keys of the
queries' length against values of the keys'); the mutant reads the key input on those calls,
so that every call of the catalogue runs and the class is judged on the others."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "mha_key_from_query_input"
EXPECTED_CODES = frozenset({"attention.input_read_wrong"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        keys = q if q.shape == k.shape else k  # BUG: w_k reads the queries
        return super().forward(q, keys, v, mask, causal)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
