"""A GPT-2-style decoder written with einsum and packed heads (blind benchmark implementation).

Weights are stored ``[in, out]`` (x @ W, as GPT-2's Conv1D), queries, keys and values come
out of one fused ``c_attn`` projection, and heads stay packed in the last axes
(``[B, L, H, d]``) throughout: scores are ``einsum("bqhd,bkhd->bhqk")``. LayerNorm and the
tanh GELU are written out by hand; learned positions, tied head, a KV cache kept as
``[B, T, H, d]`` tensors. A query with no key to attend returns zeros.

The adapter at the bottom (``adapter``) exposes layer_norm, ffn, causal_self_attention,
decoder_block and causal_lm. This file is correct; tests/blind/bugs.json holds one-line
changes to it.
"""

# bugs.json names lines of this file verbatim: the formatter must not rewrite them.
# fmt: off
# ruff: noqa: E501
from __future__ import annotations

import math

import torch
from torch import nn

from tck.adapters import Param, TorchEntry, TorchModuleAdapter
from tck.adapters.base import Unsupported
from tck.reference import Config, Conventions
from tck.reference.params import DECODER_CANONICAL


def wide(t: torch.Tensor) -> torch.Tensor:
    """float32 for half types, unchanged otherwise: where statistics are formed."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


class LayerNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-5):
        super().__init__()
        self.g = nn.Parameter(torch.ones(width))
        self.b = nn.Parameter(torch.zeros(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = wide(x)
        mu = h.mean(dim=-1, keepdim=True)
        var = (h - mu).pow(2).mean(dim=-1, keepdim=True)
        h = (h - mu) / torch.sqrt(var + self.eps)
        return (h.to(x.dtype) * self.g) + self.b


class Dense(nn.Module):
    """y = x @ w + b, w stored [in, out]."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n_in, n_out) * 0.02)
        self.b = nn.Parameter(torch.zeros(n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("...i,io->...o", x, self.w) + self.b


class MLP(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.c_fc = Dense(d_model, d_ff)
        self.c_proj = Dense(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(gelu_tanh(self.c_fc(x)))


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.d_head = d_model // n_head
        self.c_attn = Dense(d_model, 3 * d_model)
        self.c_proj = Dense(d_model, d_model)

    def forward(self, x, key_padding=None, past=None):
        bsz, n_new, d_model = x.shape
        qkv = self.c_attn(x)
        q, k, v = qkv.split(d_model, dim=-1)
        q = q.reshape(bsz, n_new, self.n_head, self.d_head)
        k = k.reshape(bsz, n_new, self.n_head, self.d_head)
        v = v.reshape(bsz, n_new, self.n_head, self.d_head)
        if past is not None:
            k = torch.cat([past[0], k], dim=1)
            v = torch.cat([past[1], v], dim=1)
        present = (k, v)
        total = k.shape[1]

        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.d_head)
        query_index = torch.arange(total - n_new, total, device=x.device)
        key_index = torch.arange(total, device=x.device)
        keep = key_index[None, :] <= query_index[:, None]
        keep = keep[None, None, :, :]
        if key_padding is not None:
            keep = keep & key_padding[:, None, None, :]
        scores = scores.masked_fill(~keep, float("-inf"))
        probs = torch.softmax(wide(scores), dim=-1).to(x.dtype)
        probs = torch.where(keep.any(dim=-1, keepdim=True), probs, torch.zeros_like(probs))
        out = torch.einsum("bhqk,bkhd->bqhd", probs, v)
        out = out.reshape(bsz, n_new, d_model)
        return self.c_proj(out), present


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int, d_ff: int):
        super().__init__()
        self.ln_1 = LayerNorm(d_model)
        self.attn = SelfAttention(d_model, n_head)
        self.ln_2 = LayerNorm(d_model)
        self.mlp = MLP(d_model, d_ff)

    def forward(self, x, key_padding=None, past=None):
        a, present = self.attn(self.ln_1(x), key_padding, past)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, present


class GPT(nn.Module):
    def __init__(self, vocab: int, max_len: int, d_model: int, n_head: int, d_ff: int, n_layer: int):
        super().__init__()
        self.wte = nn.Parameter(torch.randn(vocab, d_model) * 0.02)
        self.wpe = nn.Parameter(torch.randn(max_len, d_model) * 0.01)
        self.h = nn.ModuleList(Block(d_model, n_head, d_ff) for _ in range(n_layer))
        self.ln_f = LayerNorm(d_model)

    def forward(self, ids, positions, key_padding=None, past=None):
        x = self.wte[ids] + self.wpe[positions]
        presents = []
        for i, block in enumerate(self.h):
            x, present = block(x, key_padding, None if past is None else past[i])
            presents.append(present)
        x = self.ln_f(x)
        logits = torch.einsum("bld,vd->blv", x, self.wte)
        return logits, presents


# --------------------------------------------------------------------------- the adapter


def _check(config: Config) -> Config:
    if config.kv_heads != config.n_heads:
        raise Unsupported("this GPT has as many key/value heads as query heads")
    if config.head_dim_k * config.n_heads != config.d_model or config.head_dim_v != config.head_dim_k:
        raise Unsupported("this GPT's heads are d_model / n_heads wide for q, k and v")
    if not config.tie_weights:
        raise Unsupported("this GPT ties its head to the token table")
    return config


def _dense(ours: str, theirs: str) -> dict[str, Param | str]:
    return {f"{ours}weight": Param(f"{theirs}w", permute=(1, 0)), f"{ours}bias": f"{theirs}b"}


def _attention_map(ours: str, theirs: str, d: int) -> dict[str, Param | str]:
    mapping: dict[str, Param | str] = {}
    for i, part in enumerate("qkv"):
        mapping[f"{ours}{part}.weight"] = Param(f"{theirs}c_attn.w", slice=(1, i * d, (i + 1) * d), permute=(1, 0))
        mapping[f"{ours}{part}.bias"] = Param(f"{theirs}c_attn.b", slice=(0, i * d, (i + 1) * d))
    mapping.update(_dense(f"{ours}o.", f"{theirs}c_proj."))
    return mapping


def _norm(ours: str, theirs: str) -> dict[str, str]:
    return {f"{ours}weight": f"{theirs}g", f"{ours}bias": f"{theirs}b"}


def _block_map(ours: str, theirs: str, d: int) -> dict[str, Param | str]:
    return {
        **_attention_map(f"{ours}self_attn.", f"{theirs}attn.", d),
        **_norm(f"{ours}norm1.", f"{theirs}ln_1."),
        **_dense(f"{ours}ffn.fc1.", f"{theirs}mlp.c_fc."),
        **_dense(f"{ours}ffn.fc2.", f"{theirs}mlp.c_proj."),
        **_norm(f"{ours}norm2.", f"{theirs}ln_2."),
    }


def _lm_map(c: Config) -> dict[str, Param | str]:
    mapping: dict[str, Param | str] = {"embedding.weight": "wte", "pos_embedding.weight": "wpe"}
    for i in range(c.n_layers):
        mapping.update(_block_map(f"layers.{i}.", f"h.{i}.", c.d_model))
    mapping.update(_norm("norm.", "ln_f."))
    return mapping


def _positions(x: torch.Tensor, positions):
    if positions is not None:
        return positions.long()
    return torch.arange(x.shape[1], device=x.device).expand(x.shape[0], x.shape[1])


def _attention_forward(m, x, key_padding=None, positions=None):
    return m(x, key_padding)[0]


def _attention_step(m, cache, x, key_padding=None, positions=None):
    return m(x, key_padding, cache)


def _lm_forward(m, ids, key_padding=None, positions=None):
    return m(ids, _positions(ids, positions), key_padding)[0]


def _lm_step(m, cache, ids, key_padding=None, positions=None):
    return m(ids, _positions(ids, positions), key_padding, cache)


GPT2 = DECODER_CANONICAL  # pre-LN, LayerNorm 1e-5, tanh GELU, learned positions, tied head
BIASED = {"attention_bias": True, "ffn_bias": True, "norm_bias": True}


def _entries() -> list[TorchEntry]:
    return [
        TorchEntry(
            "layer_norm",
            make=lambda c: LayerNorm(c.d_model),
            forward=lambda m, x: m(x),
            param_map=_norm("", ""),
            config={"norm_bias": True},
        ),
        TorchEntry(
            "ffn",
            make=lambda c: MLP(c.d_model, c.d_ff),
            forward=lambda m, x: m(x),
            param_map={**_dense("fc1.", "c_fc."), **_dense("fc2.", "c_proj.")},
            conventions=Conventions(activation="gelu_tanh"),
            config={"ffn_bias": True},
        ),
        TorchEntry(
            "causal_self_attention",
            make=lambda c: SelfAttention(_check(c).d_model, c.n_heads),
            forward=_attention_forward,
            step=_attention_step,
            param_map=lambda c: _attention_map("", "", c.d_model),
            conventions=GPT2,
            config={"attention_bias": True},
        ),
        TorchEntry(
            "decoder_block",
            make=lambda c: Block(_check(c).d_model, c.n_heads, c.d_ff),
            forward=_attention_forward,
            step=_attention_step,
            param_map=lambda c: _block_map("", "", c.d_model),
            conventions=GPT2,
            config=BIASED,
        ),
        TorchEntry(
            "causal_lm",
            make=lambda c: GPT(c.vocab_size, c.max_len, _check(c).d_model, c.n_heads, c.d_ff, c.n_layers),
            forward=_lm_forward,
            step=_lm_step,
            param_map=_lm_map,
            conventions=GPT2,
            config=BIASED,
        ),
    ]


adapter = TorchModuleAdapter("blind.einsum_gpt", _entries(), devices=("cpu",))

__all__ = ["GPT", "adapter"]
