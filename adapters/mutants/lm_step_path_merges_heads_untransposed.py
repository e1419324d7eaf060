"""A Llama-style attention whose decoding path, the one every call with the cache API takes
(the prefill included, on an empty cache: ExecuTorch's ``use_kv_cache`` branch), merges its
heads by viewing the (B, H, n, d) context as (B, n, H * d) without moving the head axis,
while the full forward merges them right: a call of one token cannot show it, the prefill of
several tokens mixes its tokens (SPEC.md §3.3, §11.6)."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "lm_step_path_merges_heads_untransposed"
EXPECTED_CODES = frozenset({"attention.heads_merged_wrong_order"})


class Attention(gpt_tutorial.Attention):
    decoding = False  # the step entry's path: set while it runs

    def merge_heads(self, y: Tensor) -> Tensor:
        if not self.decoding:
            return super().merge_heads(y)
        return y.contiguous().view(y.size(0), y.size(2), -1)  # BUG: y.transpose(1, 2) first


def _decode_step(m, cache, x, key_padding=None, positions=None):
    m.decoding = True
    try:
        return m(x, positions, key_padding, cache)
    finally:
        m.decoding = False


adapter = mutant(BUG_CLASS, attention_entry(Attention, step=_decode_step))
