"""A post-LN decoder layer that takes ``tgt_mask`` (the subsequent mask) but builds its
self-attention mask from the target padding alone: every target token sees the future.

Bug source: pytorch/pytorch issue #31567 ("if we do not provide tgt_mask ... the representation
of 'hello' would consider 'world' also"); pytorch/tutorials issue #2478 "TransformerEncoder is
not causal" (the language-model tutorial never applied its subsequent mask; fixed by pull
request #2662).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.h = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, keep=None):
        B, Lq, D = query.shape
        q = self.q(query).view(B, Lq, self.h, -1).transpose(1, 2)
        k = self.k(key).view(B, key.shape[1], self.h, -1).transpose(1, 2)
        v = self.v(value).view(B, value.shape[1], self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if keep is not None:
            scores = scores.masked_fill(~keep, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return self.o(out.transpose(1, 2).reshape(B, Lq, D))


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.cross_attn = MultiHeadAttention(d_model, n_heads)
        self.ffn = nn.ModuleDict({"fc1": nn.Linear(d_model, d_ff), "fc2": nn.Linear(d_ff, d_model)})
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))

    def forward(self, x, memory, tgt_pad=None, src_pad=None, tgt_mask=None):
        # the bug: tgt_mask is accepted and never combined into the self-attention mask
        self_keep = None if tgt_pad is None else tgt_pad[:, None, None, :]
        cross_keep = None if src_pad is None else src_pad[:, None, None, :]
        x = self.norm1(x + self.self_attn(x, x, x, self_keep))
        x = self.norm2(x + self.cross_attn(x, memory, memory, cross_keep))
        return self.norm3(x + self.ffn["fc2"](torch.relu(self.ffn["fc1"](x))))


def forward(layer, x, memory, key_padding=None, memory_key_padding=None, causal=False):
    tgt_mask = None
    if causal:
        n = x.shape[1]
        tgt_mask = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
    return layer(x, memory, key_padding, memory_key_padding, tgt_mask)


ONLY = ("decoder_layer",)
LABEL = "mask.causal_leak"

adapter = TorchModuleAdapter(
    "heldout.decoder_layer_tgt_mask_unused",
    [
        TorchEntry(
            "decoder_layer",
            make=lambda c: DecoderLayer(c.d_model, c.n_heads, c.d_ff),
            forward=forward,
            # canonical parameter names: no map needed
            conventions=Conventions(fully_masked_rows="nan"),
        )
    ],
)
