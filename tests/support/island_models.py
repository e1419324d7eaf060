"""Small decoders written the way public minimal LLM code writes them, each computing one step
in float32 on purpose inside a float64 build (a *float32 island*, SPEC.md §10.12):

- ``llama_norm``: Meta's Llama ``RMSNorm`` (meta-llama/llama ``model.py``): the statistics
  of ``x.float()``, the result ``.type_as(x)``; the island is the norm statistics;
- ``llama_rope``: Meta's ``precompute_freqs_cis`` table, ``complex64``, kept as a plain
  attribute as Meta's ``Transformer`` keeps it (``module.to(torch.float64)`` never converts
  it), applied with ``view_as_complex``; the island is the RoPE table. Its RMSNorm is all
  float64;
- ``gpt_block``: a nanoGPT block (karpathy/nanoGPT ``model.py``) whose ``NewGELU`` keeps
  ``sqrt(2/pi)`` as a float32 tensor (``torch.tensor(math.sqrt(2 / math.pi))``, converted to
  float64 with the module: its value stays the float32 rounding); the island is a constant;
- ``gpt_attention``: nanoGPT's causal self-attention with its softmax taken of
  ``att.float()`` and returned ``.type_as(att)``, as transformers' eager attention does
  (``softmax(..., dtype=torch.float32)``); the island is the softmax. Its scores grow with
  the square of the inputs, so float32's rounding of them grows too: the suite's calls at
  30 times the usual magnitude are where a bound scaled by the output alone falls short.

``adapter(name, declared=..., bug=...)`` exposes one of them through ``TorchModuleAdapter`` in
float64; ``declared`` puts the island in its ``Conventions.float32_steps``, ``bug`` replaces the
model's norm by one with eps outside the square root (a real ~5e-6 relative bug).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn
from torch.nn import functional as F

from tck.adapters import Chunk, ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions, canonical_conventions

MAX_SEQ_LEN = 4096  # Meta's table covers params.max_seq_len * 2 positions
ISLANDS = {
    "llama_norm": "norm_statistics",
    "llama_rope": "rope_table",
    "gpt_block": "constants",
    "gpt_attention": "softmax",
}


class RMSNorm(nn.Module):  # meta-llama/llama model.py
    def __init__(self, dim: int, eps: float = 1e-5, eps_outside: bool = False, wide: bool = True):
        super().__init__()
        self.eps, self.eps_outside, self.wide = eps, eps_outside, wide
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        if self.eps_outside:  # the bug: x / (rms + eps)
            return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        # Meta's x.float(); ``wide=False`` upcasts half precision only (no island)
        upcast = self.wide or x.dtype in (torch.float16, torch.bfloat16)
        output = self._norm(x.float() if upcast else x).type_as(x)
        return output * self.weight


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0):  # meta-llama/llama
    # Meta forms the angles in float32 (a second island, growing with the position); here
    # they are formed in float64 and only the table is kept in complex64, as Meta's buffer
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].double() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(freqs), freqs).to(torch.complex64)


class Rotary(nn.Module):
    def __init__(self, head_dim: int, max_len: int = MAX_SEQ_LEN):
        super().__init__()
        # a plain attribute, as Meta's Transformer keeps it: module.to() never converts it
        self.freqs_cis = precompute_freqs_cis(head_dim, max_len)

    def forward(self, x, positions):  # x [B, H, L, d], positions [L] or [B, L]
        x_ = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
        freqs = self.freqs_cis.to(x.device)[positions]  # [L, d/2] or [B, L, d/2]
        if freqs.dim() == 3:
            freqs = freqs[:, None]
        return torch.view_as_real(x_ * freqs).flatten(-2).type_as(x)


class NewGELU(nn.Module):  # nanoGPT's, with its constant kept as a float32 tensor
    def __init__(self):
        super().__init__()
        self.register_buffer("c", torch.tensor(math.sqrt(2.0 / math.pi)), persistent=False)

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(self.c * (x + 0.044715 * torch.pow(x, 3.0))))


class LayerNorm(nn.Module):  # nanoGPT's (F.layer_norm), or by hand with the bug injected
    def __init__(self, dim: int, eps_outside: bool = False):
        super().__init__()
        self.eps, self.eps_outside = 1e-5, eps_outside
        self.weight, self.bias = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        if not self.eps_outside:  # F.layer_norm keeps 16-bit inputs' statistics in float32
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
        # the bug, (x - mean) / (std + eps), with the statistics in float32 as above (so
        # that the eps is the only difference from the correct norm)
        wide = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        mean = wide.mean(-1, keepdim=True)
        std = (wide - mean).pow(2).mean(-1, keepdim=True).sqrt()
        return ((wide - mean) / (std + self.eps)).type_as(x) * self.weight + self.bias


class CausalSelfAttention(nn.Module):  # nanoGPT's
    def __init__(self, n_embd: int, n_head: int, block_size: int, softmax_float32: bool = False):
        super().__init__()
        self.n_head, self.softmax_float32 = n_head, softmax_float32
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        mask = torch.tril(torch.ones(block_size, block_size))
        self.register_buffer("bias", mask.view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        if self.softmax_float32:  # transformers' eager attention: the softmax in float32
            y = torch.softmax(att.float(), dim=-1).type_as(att) @ v
        else:
            y = torch.softmax(att, dim=-1) @ v  # (B, nh, T, hs)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):  # nanoGPT's
    def __init__(self, n_embd: int, n_head: int, block_size: int, n_hidden: int, bug: bool):
        super().__init__()
        self.ln_1, self.ln_2 = LayerNorm(n_embd, bug), LayerNorm(n_embd, bug)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, n_hidden), NewGELU(), nn.Linear(n_hidden, n_embd)
        )

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def _gpt_param_map(attention: str = "attn.") -> dict:
    """Canonical -> nanoGPT names: of a block, or (``attention=""``) of its attention."""
    yours = {"self_attn.o": f"{attention}c_proj"}
    if attention:
        yours |= {"norm1": "ln_1", "norm2": "ln_2", "ffn.fc1": "mlp.0", "ffn.fc2": "mlp.2"}
    param_map: dict = {}
    for p in ("weight", "bias"):
        param_map |= {f"{k}.{p}": f"{v}.{p}" for k, v in yours.items()}
        fused = f"{attention}c_attn.{p}"
        param_map |= {f"self_attn.{n}.{p}": Chunk(fused, i, 3) for i, n in enumerate("qkv")}
    if not attention:  # the attention alone: its parameters have no self_attn. prefix
        param_map = {k.removeprefix("self_attn."): v for k, v in param_map.items()}
    return param_map


def adapter(name: str, *, declared: bool = False, bug: bool = False) -> TorchModuleAdapter:
    """The model ``name`` (``ISLANDS``) as an adapter in float64; see the module docstring."""
    steps = (ISLANDS[name],) if declared else ()
    label = f"islands.{name}{'.declared' if declared else ''}{'.bug' if bug else ''}"
    if name == "llama_norm":
        entries = [
            TorchEntry(
                "rms_norm",
                make=lambda c: RMSNorm(c.d_model, eps_outside=bug),
                forward=lambda m, x: m(x),
                conventions=_conventions("rms_norm", steps),
            )
        ]
    elif name == "llama_rope":
        entries = [
            TorchEntry(
                "rope",
                make=lambda c: Rotary(c.d_model // c.n_heads),
                forward=lambda m, x, positions: m(x, positions),
                conventions=_conventions("rope", steps),
                dtypes=("float64", "float32"),  # no complex32 kernels on the CPU
                supports=ConfigSpace(max_len=MAX_SEQ_LEN),  # the table's length
            ),
            TorchEntry(
                "rms_norm",  # all float64: the island is the table only
                make=lambda c: RMSNorm(c.d_model, eps_outside=bug, wide=False),
                forward=lambda m, x: m(x),
                conventions=_conventions("rms_norm", ()),
            ),
        ]
    elif name == "gpt_block":
        entries = [
            TorchEntry(
                "decoder_block",
                make=lambda c: Block(c.d_model, c.n_heads, c.max_len, c.d_ff, bug),
                forward=lambda m, x: m(x),
                param_map=_gpt_param_map(),
                conventions=_conventions("decoder_block", steps),
            )
        ]
    elif name == "gpt_attention":
        entries = [
            TorchEntry(
                "causal_self_attention",
                make=lambda c: CausalSelfAttention(c.d_model, c.n_heads, c.max_len, True),
                forward=lambda m, x: m(x),
                param_map=_gpt_param_map(""),
                conventions=_conventions("causal_self_attention", steps),
            )
        ]
    else:
        raise ValueError(f"unknown island model {name!r}: choose from {sorted(ISLANDS)}")
    return TorchModuleAdapter(label, entries)


def _conventions(component: str, steps: tuple[str, ...]) -> Conventions:
    """The component family's canonical conventions, with the declared float32 steps."""
    canonical = canonical_conventions(component)
    return dataclasses.replace(canonical, float32_steps=steps) if steps else canonical


# module:attr names for ``tck run --adapter support.island_models:NAME``: the model, then
# ``_declared`` (its island in float32_steps) and ``_bug`` (eps outside the square root)
ADAPTERS = {
    f"{name}{'_declared' if declared else ''}{'_bug' if bug else ''}": adapter(
        name, declared=declared, bug=bug
    )
    for name in ISLANDS
    for declared in (False, True)
    for bug in (False, True)
}
globals().update(ADAPTERS)
