"""Padding mask applied to queries instead of keys: ``pad_mask.unsqueeze(-1)`` (B, L, 1)
where ``unsqueeze(-2)`` (B, 1, L) is meant; in self-attention both broadcast to (B, L, L),
so nothing fails, but padded query rows are blanked and real tokens read the padding."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "padding_mask_on_queries"
EXPECTED_CODES = frozenset({"mask.applied_to_queries"})


class EncoderLayer(tutorial.EncoderLayer):
    @staticmethod
    def make_mask(pad_mask: Tensor | None, attn_mask: Tensor | None) -> Tensor | None:
        mask = None if pad_mask is None else pad_mask.unsqueeze(-1)  # BUG: (B, L, 1)
        if attn_mask is not None:
            mask = attn_mask.unsqueeze(0) if mask is None else mask & attn_mask
        return mask


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
