"""Eager multi-head attention that *adds* its attention mask to the scores, the way an additive
float mask is applied, but is handed a boolean keep-mask: kept keys get +1, padded keys +0, so
padding is (almost) not masked at all.

Bug source: huggingface/transformers pull request #41443 "Qwen3: fix bool attention_mask in
eager_attention_forward" ("simply adds the mask to the attention scores, which is correct for
float masks ... but produces completely wrong logits when the mask is of type torch.bool");
huggingface/pytorch-image-models pull request #2674 (``maybe_add_mask`` expects a float mask).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter


class SelfAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size)
        self.k_proj = nn.Linear(hidden_size, hidden_size)
        self.v_proj = nn.Linear(hidden_size, hidden_size)
        self.o_proj = nn.Linear(hidden_size, hidden_size)

    def _shape(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden_states, key_states, value_states, attention_mask=None):
        q = self._shape(self.q_proj(hidden_states))
        k = self._shape(self.k_proj(key_states))
        v = self._shape(self.v_proj(value_states))
        attn_weights = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)
        if attention_mask is not None:
            # the bug: a boolean mask added as if it were an additive (0 / -inf) one
            attn_weights = attn_weights + attention_mask.to(attn_weights.dtype)
        attn_weights = torch.softmax(attn_weights, dim=-1)
        out = (
            (attn_weights @ v)
            .transpose(1, 2)
            .reshape(hidden_states.shape[0], -1, q.shape[1] * self.head_dim)
        )
        return self.o_proj(out)


def forward(m, query, key, value, key_padding=None, causal=False):
    mask = None
    if key_padding is not None:
        mask = key_padding[:, None, None, :]
    if causal:
        n, s = query.shape[1], key.shape[1]
        tril = torch.ones(n, s, dtype=torch.bool, device=query.device).tril()
        mask = tril if mask is None else mask & tril
    return m(query, key, value, mask)


ONLY = ("mha",)
LABEL = "mask.added_as_bias"

names = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj"}
adapter = TorchModuleAdapter(
    "heldout.mha_bool_mask_added",
    [
        TorchEntry(
            "mha",
            make=lambda c: SelfAttention(c.d_model, c.n_heads),
            forward=forward,
            param_map={
                f"{k}.{p}": f"{v}.{p}" for k, v in names.items() for p in ("weight", "bias")
            },
        )
    ],
)
