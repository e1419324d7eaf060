"""A GPT-2 causal LM whose config ties the output head to the token table but whose head is
a matrix of its own: ``self.lm_head = nn.Linear(d_model, vocab, bias=False)`` is built and
the ``lm_head.weight = wte.weight`` assignment that ``tie_weights()`` makes is never run (a
``post_init()`` left out of a port, HF's ``_tied_weights_keys`` missing the head). The
checkpoint loads the embedding; the logits come from the head's random initialisation
(SPEC.md §8.3, §10.3)."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "lm_head_not_tied"
EXPECTED_CODES = frozenset({"model.head_not_tied"})


class GPT(gpt_tutorial.GPT):
    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.lm_head = nn.Linear(self.wte.embedding_dim, self.wte.num_embeddings, bias=False)
        # BUG: self.lm_head.weight = self.wte.weight (tie_weights()) is never run

    def logits(self, h: Tensor) -> Tensor:
        return self.lm_head(h)


adapter = mutant(BUG_CLASS, gpt_entry(GPT))
