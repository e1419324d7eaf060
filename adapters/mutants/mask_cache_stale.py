"""A key-padding mask cached by shape: multi-head attention that builds its additive mask
once per (batch, length) and reuses it for the next call of the same shape, so a later batch
with other lengths is masked with an earlier batch's padding. Cited: vllm-project/vllm-ascend
#2428 (an attention-mask cache whose key is not the mask: ``_seq_len_cached`` aliases the
lengths tensor and is reused after it changes), jingyaogong/minimind#221 (a cached mask
sliced to the wrong shape under a KV cache).
"""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import mha_entry, mutant

BUG_CLASS = "mask_cache_stale"
EXPECTED_CODES = frozenset({"state.leaks_between_calls"})


class MultiHeadAttention(tutorial.MultiHeadAttention):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.1):
        super().__init__(d_model, n_heads, dropout)
        self._cached: Tensor | None = None

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        if mask is not None:
            if self._cached is None or self._cached.shape != mask.shape:
                self._cached = mask.clone()
            mask = self._cached  # BUG: keyed by shape, not by content
        return super().forward(q, k, v, mask, causal)


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention))
