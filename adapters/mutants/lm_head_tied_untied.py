"""A Llama-style causal LM with an untied output projection that computes its logits with
the token embedding instead: ``F.linear(norm(h), tok_embeddings.weight)`` for
``output(norm(h))``, code ported from a tied model (GPT-2) to one whose head is its own
(SPEC.md §8.3)."""

from __future__ import annotations

import torch.nn.functional as F

from . import gpt_tutorial
from .gpt_tutorial import llama_entry
from .tutorial import mutant

BUG_CLASS = "lm_head_tied_untied"
EXPECTED_CODES = frozenset({"model.head_tied_to_embedding"})


class Llama(gpt_tutorial.Llama):
    def forward(self, ids, pad_mask=None, positions=None, caches=None):  # type: ignore[no-untyped-def]
        x = self.tok_embeddings(ids)
        new = []
        for i, layer in enumerate(self.layers):
            x, cache = layer(x, positions, pad_mask, None if caches is None else caches[i])
            new.append(cache)
        return F.linear(self.norm(x), self.tok_embeddings.weight), new  # BUG: self.output


adapter = mutant(BUG_CLASS, llama_entry(Llama))
