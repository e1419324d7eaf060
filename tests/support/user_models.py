"""Small modules written the way users write them, at their own sizes.

Each is what a tutorial or a paper reimplementation has: an MLP hard-coded at 4 x d_model, a
sinusoidal table built once for max_len 5000, heads 64 wide (d_model = n_heads * 64), the
paper's layout with no bias in the attention projections and a bias in the FFN, and a model
that takes at most 16 positions. Each adapter is the module plus a ``ConfigSpace`` saying
what it can be (``supports=``); the ``*_undeclared`` adapters are the same modules without
it, to show what the declaration changes.
"""

from __future__ import annotations

import dataclasses
import math
import os

import torch
from torch import nn

from tck.adapters import ConfigSpace, Times, TorchEntry, TorchModuleAdapter

DT = torch.float64


class MLP(nn.Module):
    """The position-wise FFN with its hidden width hard-coded at 4 x d_model."""

    def __init__(self, d_model: int):
        super().__init__()
        self.fc1 = nn.Linear(d_model, 4 * d_model, dtype=DT)
        self.fc2 = nn.Linear(4 * d_model, d_model, dtype=DT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class PositionalEncoding(nn.Module):
    """The sinusoidal table for positions 0 .. max_len - 1, built once (max_len 5000)."""

    def __init__(self, d_model: int, max_len: int = 5000):
        super().__init__()
        position = torch.arange(max_len, dtype=DT)[:, None]
        div = torch.exp(torch.arange(0, d_model, 2, dtype=DT) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model, dtype=DT)
        pe[:, 0::2] = torch.sin(position * div)
        pe[:, 1::2] = torch.cos(position * div)[:, : d_model // 2]
        self.register_buffer("pe", pe)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        if positions.numel() and int(positions.max()) >= self.pe.shape[0]:
            raise IndexError(f"position {int(positions.max())} >= max_len {self.pe.shape[0]}")
        return self.pe[positions]


def _keep(lq, lk, key_padding, attn_mask, causal, device):
    keep = torch.ones(1, 1, lq, lk, dtype=torch.bool, device=device)
    if key_padding is not None:
        keep = keep & key_padding[:, None, None, :]
    if attn_mask is not None:
        keep = keep & attn_mask[None, None]
    if causal is not None and bool(causal):
        keep = keep & torch.ones(lq, lk, dtype=torch.bool, device=device).tril()
    return keep


class Attention(nn.Module):
    """Multi-head attention with heads 64 wide (d_model = heads * 64); ``bias`` switches
    the bias of all four projections (the paper's layout has none)."""

    def __init__(self, heads: int, head_dim: int = 64, bias: bool = True):
        super().__init__()
        d = heads * head_dim
        self.heads, self.head_dim = heads, head_dim
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=bias, dtype=DT) for _ in range(4))

    def forward(self, query, key, value, key_padding=None, attn_mask=None, causal=None):
        b, lq, _ = query.shape
        lk = key.shape[1]

        def split(x, n):
            return x.view(b, n, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = split(self.q(query), lq), split(self.k(key), lk), split(self.v(value), lk)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        keep = _keep(lq, lk, key_padding, attn_mask, causal, query.device)
        weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
        weights = torch.nan_to_num(weights, nan=0.0)  # a query with no key: zeros
        out = (weights @ v).transpose(1, 2).reshape(b, lq, self.heads * self.head_dim)
        return self.o(out)


class EncoderLayer(nn.Module):
    """Post-LN encoder layer as in the paper: attention without bias, FFN (4 x d) with one."""

    def __init__(self, heads: int, head_dim: int = 64):
        super().__init__()
        d = heads * head_dim
        self.self_attn = Attention(heads, head_dim, bias=False)
        self.ffn = MLP(d)
        self.norm1 = nn.LayerNorm(d, dtype=DT)
        self.norm2 = nn.LayerNorm(d, dtype=DT)

    def forward(self, x, key_padding=None, attn_mask=None, causal=None):
        x = self.norm1(x + self.self_attn(x, x, x, key_padding, attn_mask, causal))
        return self.norm2(x + self.ffn(x))


# ------------------------------------------------------------------------------ adapters

FFN_4X = ConfigSpace(relations={"d_ff": Times("d_model", 4)})
TABLE_5000 = ConfigSpace(max_len=5000)
HEADS_64 = ConfigSpace(head_dim=64)
PAPER_LAYER = ConfigSpace(
    head_dim=64, relations={"d_ff": Times("d_model", 4)}, biases={"attention": False, "ffn": True}
)


def _mha(m, query, key, value, key_padding=None, attn_mask=None, causal=None):
    return m(query, key, value, key_padding, attn_mask, causal)


def _layer(m, x, key_padding=None, attn_mask=None, causal=None):
    return m(x, key_padding, attn_mask, causal)


def _entries(declared: bool) -> list[TorchEntry]:
    def space(s: ConfigSpace) -> ConfigSpace | None:
        return s if declared else None

    return [
        TorchEntry(
            "ffn", make=lambda c: MLP(c.d_model), forward=lambda m, x: m(x), supports=space(FFN_4X)
        ),
        TorchEntry(
            "sinusoidal_pe",
            make=lambda c: PositionalEncoding(c.d_model),
            forward=lambda m, positions: m(positions),
            supports=space(TABLE_5000),
        ),
        TorchEntry(
            "mha", make=lambda c: Attention(c.n_heads), forward=_mha, supports=space(HEADS_64)
        ),
        TorchEntry(
            "encoder_layer",
            make=lambda c: EncoderLayer(c.n_heads),
            forward=_layer,
            supports=space(PAPER_LAYER),
        ),
    ]


def adapter() -> TorchModuleAdapter:
    return TorchModuleAdapter("user_models", _entries(declared=True))


def undeclared() -> TorchModuleAdapter:
    return TorchModuleAdapter("user_models_undeclared", _entries(declared=False))


def _recorded(component: str, forward, limit: int):
    """``forward`` that appends each call's length to $TCK_TEST_LENGTHS (the test reads it:
    the run is a child process) and refuses more than ``limit`` positions."""

    def wrapped(m, **inputs):
        first = inputs["positions" if component == "sinusoidal_pe" else "x"]
        length = int(first.numel() if component == "sinusoidal_pe" else first.shape[1])
        log = os.environ.get("TCK_TEST_LENGTHS")
        if log:
            with open(log, "a", encoding="utf-8") as out:
                out.write(f"{component} {length}\n")
        if length > limit:
            raise ValueError(f"sequence length {length} > max_len {limit}")
        return forward(m, **inputs)

    return wrapped


SHORT = ConfigSpace(max_len=16)


def short() -> TorchModuleAdapter:
    """Subjects that take at most 16 positions: torch.nn's encoder layer (slow path) and the
    table above built for 16 positions; both refuse a longer call."""
    from tck.adapters.torch_nn import adapter as torch_nn

    layer = torch_nn._entries["encoder_layer[slow_path]"]
    return TorchModuleAdapter(
        "short",
        [
            dataclasses.replace(
                layer,
                name="encoder_layer",
                forward=_recorded("encoder_layer", layer.forward, 16),
                supports=SHORT,
            ),
            TorchEntry(
                "sinusoidal_pe",
                make=lambda c: PositionalEncoding(c.d_model, max_len=16),
                forward=_recorded("sinusoidal_pe", lambda m, positions: m(positions), 16),
                supports=SHORT,
            ),
        ],
    )
