"""A GPT-2 block (nanoGPT style, pre-LN, tanh GELU) with a KV cache that is filled but not
read: each call appends its keys and values to the cache, then attends over this call's keys
and values only. A full forward is right; a decoded token sees only itself.

Bug source: deepspeedai/DeepSpeed pull request #7428 "Use past_key_value when provided"
("Previously, past_key_value was ignored"); huggingface/transformers issue #35684 (cached
keys/values concatenated outside the model and not used as the model expects).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import Chunk, TorchEntry, TorchModuleAdapter, Unsupported


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x, cache=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            if "k" in cache:
                cache["k"] = torch.cat([cache["k"], k], dim=2)
                cache["v"] = torch.cat([cache["v"], v], dim=2)
            else:
                cache["k"], cache["v"] = k, v
            # the bug: attention below still uses this call's k and v, not cache["k"], cache["v"]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~causal, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, n_hidden: int):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, n_hidden), nn.GELU(approximate="tanh"), nn.Linear(n_hidden, n_embd)
        )

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln_1(x), cache)
        return x + self.mlp(self.ln_2(x))


def step(block, cache, x, positions=None, key_padding=None):
    if key_padding is not None:
        raise Unsupported("this block takes no padding mask")
    cache = {} if cache is None else cache
    return block(x, cache), cache


ONLY = ("decoder_block",)
LABEL = "cache.ignored"

yours = {"self_attn.o": "attn.c_proj", "norm1": "ln_1", "norm2": "ln_2", "ffn.fc1": "mlp.0"}
yours |= {"ffn.fc2": "mlp.2"}
param_map = {}
for p in ("weight", "bias"):
    param_map |= {f"{k}.{p}": f"{v}.{p}" for k, v in yours.items()}
    param_map |= {
        f"self_attn.{n}.{p}": Chunk(f"attn.c_attn.{p}", i, 3) for i, n in enumerate("qkv")
    }
adapter = TorchModuleAdapter(
    "heldout.gpt_block_cache_unused",
    [
        TorchEntry(
            "decoder_block",
            make=lambda c: Block(c.d_model, c.n_heads, c.d_ff),
            forward=lambda block, x: block(x),
            param_map=param_map,
            step=step,
        )
    ],
)
