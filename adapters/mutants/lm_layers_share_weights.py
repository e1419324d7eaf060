"""A Llama-style causal LM whose layer loop runs the first layer every time:
``self.layers[0](x, ...)`` where ``layer(x, ...)`` was meant (an index fixed while
refactoring the loop), so every layer's own weights are loaded and never used. Each layer
keeps its own cache slot, so cached decoding still runs.
"""

from __future__ import annotations

from . import gpt_tutorial
from .gpt_tutorial import llama_entry
from .tutorial import mutant

BUG_CLASS = "lm_layers_share_weights"
EXPECTED_CODES = frozenset({"blocks.layer_params_wrong"})


class Llama(gpt_tutorial.Llama):
    def forward(self, ids, pad_mask=None, positions=None, caches=None):  # type: ignore[no-untyped-def]
        x = self.tok_embeddings(ids)
        new = []
        for i in range(len(self.layers)):
            layer = self.layers[0]  # BUG: not self.layers[i]
            x, cache = layer(x, positions, pad_mask, None if caches is None else caches[i])
            new.append(cache)
        return self.output(self.norm(x)), new


adapter = mutant(BUG_CLASS, llama_entry(Llama))
