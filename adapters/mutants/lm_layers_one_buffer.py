"""A Llama-style causal LM (built from ``n_decoder_layers``, as a model whose config names its
decoder depth that way is) whose layers all extend one growing cache: the decoding loop
threads a single ``(k, v)`` buffer through the layers, so each layer appends its keys to
what the layer before it wrote for the same tokens, and the next step reads every layer's
keys as one sequence. A one-layer model decodes right (SPEC.md §11.6). Resembles a cache list
made by repetition (``[cache] * n_layers``), where every entry is the same object."""

from __future__ import annotations

import dataclasses

from . import gpt_tutorial
from .gpt_tutorial import llama_entry
from .tutorial import mutant

BUG_CLASS = "lm_layers_one_buffer"
EXPECTED_CODES = frozenset({"cache.layers_share_pool"})


class Llama(gpt_tutorial.Llama):
    def __init__(self, c):  # type: ignore[no-untyped-def]
        super().__init__(dataclasses.replace(c, n_layers=c.n_decoder_layers))

    def forward(self, ids, pad_mask=None, positions=None, caches=None):  # type: ignore[no-untyped-def]
        if caches is None:
            return super().forward(ids, pad_mask, positions, None)
        x = self.tok_embeddings(ids)
        buffer = caches[0]
        for layer in self.layers:  # BUG: one buffer extended by every layer
            x, buffer = layer(x, positions, pad_mask, buffer)
        return self.output(self.norm(x)), [buffer] * len(self.layers)


def _llama_map(c):  # type: ignore[no-untyped-def]
    return gpt_tutorial.llama_map(dataclasses.replace(c, n_layers=c.n_decoder_layers))


adapter = mutant(BUG_CLASS, dataclasses.replace(llama_entry(Llama), param_map=_llama_map))
