"""A GPT-2 causal LM whose decoding path, written apart from the full forward for the calls
that carry a cache, computes the logits from the last block's output without the final
LayerNorm ``ln_f``: the full forward and the prefill are right, every later step is not
(KerasHub's ``call_with_cache`` with its ``hidden_states = x = layer_norm(x)`` cut to
``hidden_states = layer_norm(x)``: the head reads the un-normalised ``x``; SPEC.md §11.6,
§7.2)."""

from __future__ import annotations

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "lm_steps_skip_final_norm"
EXPECTED_CODES = frozenset({"blocks.final_norm_missing"})


class GPT(gpt_tutorial.GPT):
    def forward(self, idx, pad_mask=None, positions=None, caches=None):
        if caches is None:
            return super().forward(idx, pad_mask, positions)
        # generate()'s path for the calls after the prefill, kept apart from the forward
        b, n = idx.shape
        if positions is None:
            positions = self.positions_from(pad_mask, b, n, caches[0][0].shape[2])
        x = self.wte(idx) + self.wpe(positions)
        new = []
        for block, cache in zip(self.h, caches, strict=True):
            x, cache = block(x, positions, pad_mask, cache)
            new.append(cache)
        return self.logits(x), new  # BUG: self.logits(self.ln_f(x))


adapter = mutant(BUG_CLASS, gpt_entry(GPT))
