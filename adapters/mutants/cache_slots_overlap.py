"""A paged KV cache whose slot address is ``page + offset`` where ``page * page_size +
offset`` is meant (pages of 4 tokens, the page table the identity): tokens 1 and 4 share a
slot, so do 2, 5 and 8, and so on, and each later token overwrites an earlier one's keys
and values. The plain forward does not use the cache and is right; cached decoding reads
the later token's entry twice and the earlier one's never (SPEC.md §11.6). Resembles the
slot-mapping bugs of paged-attention kernels (vllm-project/vllm issues on slot_mapping)."""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry
from .tutorial import mutant

BUG_CLASS = "cache_slots_overlap"
EXPECTED_CODES = frozenset({"cache.slots_overlap"})
PAGE_SIZE = 4
SLOTS = 256  # the pool: enough for any sequence the checks decode


def slot(t: int) -> int:
    page, offset = divmod(t, PAGE_SIZE)
    return page + offset  # BUG: page * PAGE_SIZE + offset


class Attention(gpt_tutorial.Attention):
    def extend_cache(self, cache, k: Tensor, v: Tensor):
        """``cache``: None (a plain forward, no cache) or (keys read, values read, the key
        pool, the value pool); the keys read are as many as the tokens so far."""
        if cache is None:
            return k, v
        b, h, n, d = k.shape
        filled = cache[0].shape[2]
        if len(cache) == 4:
            pool_k, pool_v = cache[2].clone(), cache[3].clone()
        else:  # the prefill's empty cache: a fresh pool
            pool_k, pool_v = k.new_zeros(b, h, SLOTS, d), v.new_zeros(b, h, SLOTS, d)
        for i in range(n):
            pool_k[:, :, slot(filled + i)] = k[:, :, i]
            pool_v[:, :, slot(filled + i)] = v[:, :, i]
        read = [slot(t) for t in range(filled + n)]
        return pool_k[:, :, read], pool_v[:, :, read], pool_k, pool_v


def _step(m, cache, x, key_padding=None, positions=None):
    if cache is None:  # the prefill runs on an empty cache
        empty = x.new_zeros(x.shape[0], m.n_kv_heads, 0, m.head_dim)
        cache = (empty, empty)
    out, cache = m(x, positions, key_padding, cache)
    return out, cache


adapter = mutant(BUG_CLASS, attention_entry(Attention, step=_step))
