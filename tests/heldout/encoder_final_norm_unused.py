"""A pre-LN encoder stack that builds its final LayerNorm and never applies it: the stack's
output is the last residual stream, un-normalised.

Bug source: lucidrains/vit-pytorch pull request #317 ("Update vit.py to include LayerNorm ...
which is missing"; "most transformers these days end with a final norm") and pull request #274
(where the final norm goes); davidtag/llm pull request #10 (the final norm was built but left
out of the update step).
"""

from __future__ import annotations

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_dim: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.to_q, self.to_k, self.to_v = (nn.Linear(dim, dim) for _ in range(3))
        self.to_out = nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, mlp_dim), nn.Linear(mlp_dim, dim)

    def attend(self, x, keep):
        B, L, D = x.shape
        q, k, v = (
            f(x).view(B, L, self.heads, -1).transpose(1, 2)
            for f in (self.to_q, self.to_k, self.to_v)
        )
        dots = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
        if keep is not None:
            dots = dots.masked_fill(~keep, float("-inf"))
        out = dots.softmax(dim=-1) @ v
        return self.to_out(out.transpose(1, 2).reshape(B, L, D))

    def forward(self, x, keep=None):
        x = x + self.attend(self.norm1(x), keep)
        return x + self.fc2(torch.relu(self.fc1(self.norm2(x))))


class Encoder(nn.Module):
    def __init__(self, dim: int, depth: int, heads: int, mlp_dim: int):
        super().__init__()
        self.layers = nn.ModuleList([Block(dim, heads, mlp_dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, keep=None):
        for layer in self.layers:
            x = layer(x, keep)
        return x  # the bug: self.norm is never applied


def forward(m, x, key_padding=None, causal=False):
    keep = None if key_padding is None else key_padding[:, None, None, :]
    if causal:
        n = x.shape[1]
        tril = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        keep = tril if keep is None else keep & tril
    return m(x, keep)


def param_map(c):
    ours = {"norm.weight": "norm.weight", "norm.bias": "norm.bias"}
    parts = {"self_attn.q": "to_q", "self_attn.k": "to_k", "self_attn.v": "to_v"}
    parts |= {"self_attn.o": "to_out", "ffn.fc1": "fc1", "ffn.fc2": "fc2"}
    parts |= {"norm1": "norm1", "norm2": "norm2"}
    for i in range(c.n_layers):
        for k, v in parts.items():
            for p in ("weight", "bias"):
                ours[f"layers.{i}.{k}.{p}"] = f"layers.{i}.{v}.{p}"
    return ours


ONLY = ("encoder",)
LABEL = "blocks.final_norm_missing"

adapter = TorchModuleAdapter(
    "heldout.encoder_final_norm_unused",
    [
        TorchEntry(
            "encoder",
            make=lambda c: Encoder(c.d_model, c.n_layers, c.n_heads, c.d_ff),
            forward=forward,
            param_map=param_map,
            conventions=Conventions(norm_placement="pre", fully_masked_rows="nan"),
        )
    ],
)
