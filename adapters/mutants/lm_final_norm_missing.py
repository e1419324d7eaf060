"""A GPT-2 causal LM that returns ``lm_head(hidden)`` without the final LayerNorm ``ln_f``:
the module is built and loaded from the checkpoint, but the logits are computed from the
un-normalised residual stream. Cited: vllm-project/speculators#313 ("there is a mismatch
because we do not apply the last layernorm before the lm_head": hidden states saved before
the final norm).
"""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "lm_final_norm_missing"
EXPECTED_CODES = frozenset({"blocks.final_norm_missing"})


class GPT(gpt_tutorial.GPT):
    def forward(self, idx, pad_mask=None, positions=None, caches=None):
        b, n = idx.shape
        past = 0 if caches is None else caches[0][0].shape[2]
        if positions is None:
            positions = self.positions_from(pad_mask, b, n, past)
        x = self.wte(idx) + self.wpe(positions)
        new = []
        for i, block in enumerate(self.h):
            x, cache = block(x, positions, pad_mask, None if caches is None else caches[i])
            new.append(cache)
        logits: Tensor = x @ self.wte.weight.T  # BUG: not self.ln_f(x)
        return logits, new


adapter = mutant(BUG_CLASS, gpt_entry(GPT))
