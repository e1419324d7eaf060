"""A Llama-style causal LM whose decoder layer never hands the cache it receives to its
attention (``self_attn(hidden, past_key_value=None)`` where the layer's cache belongs), while
the model builds its attention mask over the cached and the new tokens, as transformers'
decoders do (an all-ones ``attention_mask`` of ``past + n`` columns when none is given): in
a cached call the scores have the call's own keys and the mask the cache's too, and the step
raises on the size mismatch. The plain forward is right (SPEC.md §11.6)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import llama_entry
from .tutorial import mutant

BUG_CLASS = "lm_block_drops_cache"
EXPECTED_CODES = frozenset({"cache.ignored"})


class Block(gpt_tutorial.Block):
    def forward(self, x, positions=None, pad_mask=None, cache=None):
        h, cache = self.attn(self.ln_1(x), positions, pad_mask, None)  # BUG: cache
        x = x + h
        return x + self.mlp(self.ln_2(x)), cache


class Llama(gpt_tutorial.Llama):
    block = Block

    def forward(self, ids: Tensor, pad_mask=None, positions=None, caches=None):
        if pad_mask is None:  # every cached and new token may be attended
            past = 0 if caches is None else caches[0][0].shape[2]
            pad_mask = torch.ones(ids.shape[0], past + ids.shape[1], dtype=torch.long)
        return super().forward(ids, pad_mask, positions, caches)


adapter = mutant(BUG_CLASS, llama_entry(Llama))
