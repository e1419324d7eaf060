"""A Llama-style causal LM whose layers all read and write one cache: the loop hands every
layer the same pool (``caches[0]``) and keeps what the last layer wrote, as a paged cache
does when the layer index never reaches the attention (every layer on layer 0's pages). A
one-layer model decodes right; with several layers, layer 0 reads the last layer's keys and
values of the earlier tokens (SPEC.md §11.6)."""

from __future__ import annotations

from . import gpt_tutorial
from .gpt_tutorial import llama_entry
from .tutorial import mutant

BUG_CLASS = "cache_layers_share_pool"
EXPECTED_CODES = frozenset({"cache.layers_share_pool"})


class Llama(gpt_tutorial.Llama):
    def forward(self, ids, pad_mask=None, positions=None, caches=None):  # type: ignore[no-untyped-def]
        x = self.tok_embeddings(ids)
        pool = None if caches is None else caches[0]  # BUG: one pool, not caches[i]
        written = pool
        for layer in self.layers:
            x, written = layer(x, positions, pad_mask, pool)
        return self.output(self.norm(x)), [written] * len(self.layers)


adapter = mutant(BUG_CLASS, llama_entry(Llama))
