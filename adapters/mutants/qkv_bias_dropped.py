"""The query, key and value biases loaded but never added: a Llama-style attention reused
for a model whose q/k/v projections carry biases (Qwen2), computing ``x @ W.T`` only. Cited:
sbryngelson/ANEForge#253 ("Qwen2/2.5 set attention_bias=true, so their q/k/v projections
carry biases, but ``_weights_from_state_dict`` read only the projection weights and dropped
the biases"; the model produced garbage), ServiceNow/Fast-LLM#398 ("Fix Qwen converter to
correctly load QKV biases"), EricLBuehler/candle-vllm#167 (attention_bias defaulting to
false for Qwen2).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import Cache, attention_entry
from .tutorial import mutant

BUG_CLASS = "qkv_bias_dropped"
EXPECTED_CODES = frozenset({"params.bias_unused"})


class Attention(gpt_tutorial.Attention):
    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        pad_mask: Tensor | None = None,
        cache: Cache | None = None,
    ) -> tuple[Tensor, Cache]:
        b, n, _ = x.shape
        past = 0 if cache is None else cache[0].shape[2]
        if positions is None:
            positions = self.default_positions(b, n, past)
        q = F.linear(x, self.wq.weight)  # BUG: the biases are never added
        k = F.linear(x, self.wk.weight)  # BUG
        v = F.linear(x, self.wv.weight)  # BUG
        q = q.view(b, n, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.rope:
            q, k = self.rotate(q, positions), self.rotate(k, positions)
        cache = self.extend_cache(cache, k, v)
        k, v = self.repeat_kv(cache[0]), self.repeat_kv(cache[1])
        att = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        att = att.masked_fill(self.future_mask(n, k.shape[2], past > 0), float("-inf"))
        if pad_mask is not None:
            att = att.masked_fill(pad_mask[:, None, None, :] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1).nan_to_num(0.0)
        y = (att @ v).transpose(1, 2).reshape(b, n, -1)
        return self.wo(y), cache


adapter = mutant(BUG_CLASS, attention_entry(Attention))
