"""A GPT-2-style causal LM that multiplies its token embeddings by ``sqrt(d_model)`` (the
original Transformer's and Gemma's normaliser) although this model, like GPT-2 and Llama,
uses them unscaled. Cited: TensorAuto/OpenTau#179 ("every text embedding ... was being
multiplied by sqrt(hidden_size) twice": a normaliser copied from one model's code into a
model that does not apply it that way), google/gemma_pytorch#29 (which models scale their
embeddings by sqrt(hidden_size)), allenzren/open-pi-zero#9.
"""

from __future__ import annotations

import math

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "lm_embedding_scaled"
EXPECTED_CODES = frozenset({"embedding.scale_on_embeddings"})


class GPT(gpt_tutorial.GPT):
    def forward(self, idx, pad_mask=None, positions=None, caches=None):
        b, n = idx.shape
        past = 0 if caches is None else caches[0][0].shape[2]
        if positions is None:
            positions = self.positions_from(pad_mask, b, n, past)
        tokens = self.wte(idx) * math.sqrt(self.wte.embedding_dim)  # BUG: GPT-2 does not scale
        x = tokens + self.wpe(positions)
        new = []
        for i, block in enumerate(self.h):
            x, cache = block(x, positions, pad_mask, None if caches is None else caches[i])
            new.append(cache)
        logits: Tensor = self.ln_f(x) @ self.wte.weight.T
        return logits, new


adapter = mutant(BUG_CLASS, gpt_entry(GPT))
