"""A GPT that numbers the tokens of a cached call from ``len(caches)`` (the number of layers,
one cache per layer) instead of the cache's length along the sequence axis: transformers'
``past_key_values`` is a tuple over layers, and the past length must be read inside one
layer's key tensor. Every cached call's tokens get positions from n_layers, whatever the
cache holds, so the learned position table gives them the wrong rows (SPEC.md §11.6, §11.9).
Related: ml-explore/mlx-lm#93 (the cache offset read from the wrong place)."""

from __future__ import annotations

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "lm_past_length_from_layers"
EXPECTED_CODES = frozenset({"cache.position_offset_wrong"})


class GPT(gpt_tutorial.GPT):
    def forward(self, idx, pad_mask=None, positions=None, caches=None):  # type: ignore[no-untyped-def]
        if positions is None and caches is not None:
            b, n = idx.shape
            past = len(caches)  # BUG: the number of layers, not caches[0][0].shape[2]
            positions = self.positions_from(pad_mask, b, n, past)
        return super().forward(idx, pad_mask, positions, caches)


adapter = mutant(BUG_CLASS, gpt_entry(GPT))
