"""A Llama-style causal LM whose layer loop adds each layer's input to the layer's output
(``hidden_states = layer_outputs[0] + hidden_states``) although every decoder layer adds its
own residuals: the skip path is counted twice at every layer, and the stream doubles from
layer to layer (SPEC.md §7.1, §7.3)."""

from __future__ import annotations

from . import gpt_tutorial
from .gpt_tutorial import llama_entry
from .tutorial import mutant

BUG_CLASS = "lm_loop_adds_layer_input"
EXPECTED_CODES = frozenset({"blocks.residual_added_twice"})


class Llama(gpt_tutorial.Llama):
    def forward(self, ids, pad_mask=None, positions=None, caches=None):  # type: ignore[no-untyped-def]
        x = self.tok_embeddings(ids)
        new = []
        for i, layer in enumerate(self.layers):
            out, cache = layer(x, positions, pad_mask, None if caches is None else caches[i])
            x = out + x  # BUG: out, the layer has added its residuals
            new.append(cache)
        return self.output(self.norm(x)), new


adapter = mutant(BUG_CLASS, llama_entry(Llama))
