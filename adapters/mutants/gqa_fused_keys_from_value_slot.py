"""Grouped-query attention from one fused projection laid out per key/value group, each
group's queries, then its key, then its value (InternLM2's ``wqkv`` viewed as ``(..., H_kv,
g + 2, hd)``), with the keys read from the value slot: ``qkv[..., -1, :]`` for
``qkv[..., -2, :]``. Every key equals its value and the key rows of the fused weight are
never read (SPEC.md §3.4, §11.2)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry, llama_block_entry
from .tutorial import mutant

BUG_CLASS = "gqa_fused_keys_from_value_slot"
# The fused tensor is emulated: the module holds wq, wk and wv apart and concatenates their
# outputs, so the kit, which reads the layout off the adapter (TorchHandle.owners), may name
# the keys a module read with another's parameters; InternLM2's one wqkv is the qkv order.
EXPECTED_CODES = frozenset({"attention.qkv_order_wrong", "params.read_from_other_module"})


class Attention(gpt_tutorial.Attention):
    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, n, _ = x.shape
        g, hd = self.n_rep, self.head_dim
        per_group = torch.cat(  # (B, n, H_kv, g + 2, hd): queries, key, value per group
            [
                self.wq(x).view(b, n, self.n_kv_heads, g, hd),
                self.wk(x).view(b, n, self.n_kv_heads, 1, hd),
                self.wv(x).view(b, n, self.n_kv_heads, 1, hd),
            ],
            dim=3,
        )
        q = per_group[..., :g, :].reshape(b, n, self.n_heads, hd).transpose(1, 2)
        k = per_group[..., -1, :].transpose(1, 2)  # BUG: [..., -2, :]
        v = per_group[..., -1, :].transpose(1, 2)
        return q, k, v


class Block(gpt_tutorial.Block):
    attention = Attention


adapter = mutant(BUG_CLASS, attention_entry(Attention), llama_block_entry(Block))
