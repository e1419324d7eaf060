"""A ring cache with Mistral's fill (``torch.finfo(dtype).min``) that reads the new tokens'
padding flags from the first columns of the running key-padding mask (``pad_mask[:, :n]``
for ``pad_mask[:, F:F + n]``): a left-padded row's decoded tokens are flagged as padding,
and a query whose keys are all flagged weighs every key it read equally, its own call's
later tokens included; rows without padding decode right (SPEC.md §11.6, §11.7, §4.4).
Resembles mistral-src's rolling buffer slicing the prefill's mask in decoding steps."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from .ring_cache import MinFillRingAttention, ring_entry
from .tutorial import mutant

BUG_CLASS = "ring_cache_min_fill_padding_from_start"
EXPECTED_CODES = frozenset({"cache.padding_misaligned"})


class Attention(MinFillRingAttention):
    def key_padding(self, pad_mask: Tensor, key_token: Tensor) -> Tensor:
        flags = pad_mask[:, key_token].clone()
        n = self.new_tokens
        flags[:, -n:] = pad_mask[:, :n]  # BUG: the call's own flags from the first columns
        return flags[:, None, None, :] == 0

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Any:
        self.new_tokens = x.shape[1]
        return super().forward(x, *args, **kwargs)


adapter = mutant(BUG_CLASS, ring_entry(Attention))
