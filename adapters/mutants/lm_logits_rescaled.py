"""A causal LM with tied embeddings whose logits are divided by ``d_model``: a tied head's
logit scale written from memory (flax's WMT example divides the tied logits by
``sqrt(d_model)``; T5 multiplies the hidden states by ``d_model ** -0.5`` before its tied
head) into a model that declares no such scale, and with the wrong power. Every logit is
the spec's times 1/d_model (SPEC.md §8.2, §8.3): argmax decoding does not notice; the loss
and any sampling temperature do. The declared scale itself (``embedding_scale='prj'``, 1 /
sqrt(d_model)) is a convention, named ``embedding.scale_on_logits``; this factor is not.
"""

from __future__ import annotations

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "lm_logits_rescaled"
EXPECTED_CODES = frozenset({"model.logits_scaled"})


class GPT(gpt_tutorial.GPT):
    def forward(self, idx, pad_mask=None, positions=None, caches=None):  # type: ignore[no-untyped-def]
        logits, new = super().forward(idx, pad_mask, positions, caches)
        return logits / self.wte.weight.shape[1], new  # BUG: a logit scale of 1/d_model


adapter = mutant(BUG_CLASS, gpt_entry(GPT))
