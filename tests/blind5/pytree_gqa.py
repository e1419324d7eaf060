# fmt: off
# ruff: noqa
"""A decoder-only model written the way JAX/flax ports write it, translated to torch: the weights
are one flat dict (a "pytree") of tensors stored [in, out] (``x @ w``), every layer is a pure
function of (params, prefix, inputs), and no ``nn.Module`` exists per layer (one holder keeps the
dict so that torch sees the parameters). Llama-style: RMSNorm (eps 1e-6), RoPE on interleaved
pairs (Meta's original ``precompute_freqs_cis`` layout, written with real arithmetic), grouped
query attention computed by viewing the queries as [B, H_kv, group, L, d] against keys
[B, H_kv, 1, Lk, d] (no ``repeat_kv``), SwiGLU, untied unembedding stored [D, V].

Incremental decoding uses a **static preallocated KV cache**: one buffer per layer of
``max_len`` slots, written by index (``cache_k[:, :, start:start + L] = k``), with the number of
filled slots kept beside it, as JAX decoders and TensorRT-style engines do. In 16-bit the norm
statistics and the softmax are float32 and the RoPE angles float64; in float64 everything stays
float64. A query without any visible key gets zeros.
"""

import dataclasses
import math

import torch
from torch import nn
import torch.nn.functional as F

from tck.adapters import Param, TorchEntry, TorchModuleAdapter
from tck.adapters.reference import LLAMA

EPS = 1e-6
ROPE_BASE = 10000.0
HALF = (torch.float16, torch.bfloat16)


# ---- initialisers: every component's weights as a flat dict ----

def dense(gen, n_in, n_out):
    return torch.randn(n_in, n_out, generator=gen, dtype=torch.float64) / math.sqrt(n_in)


def init_attention(gen, cfg, prefix=""):
    d = cfg.d_model // cfg.n_heads
    kv = cfg.n_kv_heads * d
    return {
        prefix + "wq": dense(gen, cfg.d_model, cfg.d_model),
        prefix + "wk": dense(gen, cfg.d_model, kv),
        prefix + "wv": dense(gen, cfg.d_model, kv),
        prefix + "wo": dense(gen, cfg.d_model, cfg.d_model),
    }


def init_mlp(gen, cfg, prefix=""):
    return {
        prefix + "w_gate": dense(gen, cfg.d_model, cfg.d_ff),
        prefix + "w_up": dense(gen, cfg.d_model, cfg.d_ff),
        prefix + "w_down": dense(gen, cfg.d_ff, cfg.d_model),
    }


def init_block(gen, cfg, prefix=""):
    params = {prefix + "attn_norm": torch.ones(cfg.d_model, dtype=torch.float64)}
    params |= init_attention(gen, cfg, prefix + "attn_")
    params[prefix + "mlp_norm"] = torch.ones(cfg.d_model, dtype=torch.float64)
    params |= init_mlp(gen, cfg, prefix + "mlp_")
    return params


def init_lm(gen, cfg):
    params = {"embed": torch.randn(cfg.vocab_size, cfg.d_model, generator=gen, dtype=torch.float64)}
    for i in range(cfg.n_layers):
        params |= init_block(gen, cfg, f"layer{i}_")
    params["final_norm"] = torch.ones(cfg.d_model, dtype=torch.float64)
    params["unembed"] = dense(gen, cfg.d_model, cfg.vocab_size)
    return params


# ---- pure functions ----

def rms_norm(x, scale):
    dtype = x.dtype
    h = x.float() if dtype in HALF else x
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return scale * h.to(dtype)


def rope_angles(positions, head_dim):
    inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    return positions.to(torch.float64)[..., None] * inv_freq


def apply_rope(x, angles):
    # x [B, H, L, d]; angles [B, L, d/2]; pairs (x[2i], x[2i+1]) rotated by angles[i]
    cos = torch.cos(angles)[:, None].to(x.dtype)
    sin = torch.sin(angles)[:, None].to(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)
    return rotated.flatten(-2)


def mlp(params, prefix, x):
    gate = x @ params[prefix + "w_gate"]
    up = x @ params[prefix + "w_up"]
    return (F.silu(gate) * up) @ params[prefix + "w_down"]


def attention(params, prefix, x, n_heads, positions, key_padding, cache, start):
    B, L, D = x.shape
    head_dim = D // n_heads
    q = (x @ params[prefix + "wq"]).view(B, L, n_heads, head_dim).transpose(1, 2)
    k = (x @ params[prefix + "wk"]).view(B, L, -1, head_dim).transpose(1, 2)
    v = (x @ params[prefix + "wv"]).view(B, L, -1, head_dim).transpose(1, 2)
    n_kv = k.shape[1]
    angles = rope_angles(positions, head_dim)
    q = apply_rope(q, angles)
    k = apply_rope(k, angles)
    if cache is not None:
        cache["k"][:, :, start:start + L] = k
        cache["v"][:, :, start:start + L] = v
        k = cache["k"][:, :, :start + L]
        v = cache["v"][:, :, :start + L]
    Lk = k.shape[2]
    q = q.view(B, n_kv, n_heads // n_kv, L, head_dim)
    scores = torch.matmul(q, k[:, :, None].transpose(-1, -2)) / math.sqrt(head_dim)
    q_index = torch.arange(start, start + L)[:, None]
    k_index = torch.arange(Lk)[None, :]
    allowed = (k_index <= q_index)[None, None, None]
    if key_padding is not None:
        allowed = allowed & key_padding[:, None, None, None, :Lk]
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    if scores.dtype in HALF:
        probs = torch.softmax(scores.float(), dim=-1).to(scores.dtype)
    else:
        probs = torch.softmax(scores, dim=-1)
    probs = probs * allowed.any(dim=-1, keepdim=True)
    out = torch.matmul(probs, v[:, :, None])
    out = out.reshape(B, n_heads, L, head_dim).transpose(1, 2).reshape(B, L, D)
    return out @ params[prefix + "wo"]


def block(params, prefix, x, n_heads, positions, key_padding, cache, start):
    h = x + attention(params, prefix + "attn_", rms_norm(x, params[prefix + "attn_norm"]), n_heads, positions, key_padding, cache, start)
    return h + mlp(params, prefix + "mlp_", rms_norm(h, params[prefix + "mlp_norm"]))


def lm(params, ids, n_heads, n_layers, positions, key_padding, caches, start):
    x = params["embed"][ids]
    for i in range(n_layers):
        x = block(params, f"layer{i}_", x, n_heads, positions, key_padding, None if caches is None else caches[i], start)
    x = rms_norm(x, params["final_norm"])
    return x @ params["unembed"]


# ---- the holder torch needs, the static cache, the adapter ----

class Holder(nn.Module):
    """Keeps the flat dict as parameters; the model itself is the pure functions above."""

    def __init__(self, params, cfg):
        super().__init__()
        self.params = nn.ParameterDict({k: nn.Parameter(v) for k, v in params.items()})
        self.n_heads = cfg.n_heads
        self.n_layers = cfg.n_layers
        self.max_len = cfg.max_len

    def tree(self):
        return dict(self.params.items())


def make(init):
    def build(cfg):
        gen = torch.Generator().manual_seed(0)
        return Holder(init(gen, cfg), cfg)
    return build


def default_positions(x, start, positions):
    if positions is not None:
        return positions if positions.dim() == 2 else positions[None]
    return torch.arange(start, start + x.shape[1])[None].expand(x.shape[0], -1)


def new_cache(m, batch, n_kv, head_dim, dtype, n_caches):
    shape = (batch, n_kv, m.max_len, head_dim)
    return {"layers": [{"k": torch.zeros(shape, dtype=dtype), "v": torch.zeros(shape, dtype=dtype)} for _ in range(n_caches)], "length": 0}


def attn_forward(m, x, key_padding=None, positions=None):
    return attention(m.tree(), "", x, m.n_heads, default_positions(x, 0, positions), key_padding, None, 0)


def attn_step(m, cache, x, key_padding=None, positions=None):
    p = m.tree()
    if cache is None:
        cache = new_cache(m, x.shape[0], p["wk"].shape[1] // (x.shape[2] // m.n_heads), x.shape[2] // m.n_heads, x.dtype, 1)
    start = cache["length"]
    out = attention(p, "", x, m.n_heads, default_positions(x, start, positions), key_padding, cache["layers"][0], start)
    return out, {"layers": cache["layers"], "length": start + x.shape[1]}


def block_forward(m, x, key_padding=None, positions=None):
    return block(m.tree(), "", x, m.n_heads, default_positions(x, 0, positions), key_padding, None, 0)


def block_step(m, cache, x, key_padding=None, positions=None):
    p = m.tree()
    if cache is None:
        cache = new_cache(m, x.shape[0], p["attn_wk"].shape[1] // (x.shape[2] // m.n_heads), x.shape[2] // m.n_heads, x.dtype, 1)
    start = cache["length"]
    out = block(p, "", x, m.n_heads, default_positions(x, start, positions), key_padding, cache["layers"][0], start)
    return out, {"layers": cache["layers"], "length": start + x.shape[1]}


def lm_forward(m, ids, key_padding=None, positions=None):
    return lm(m.tree(), ids, m.n_heads, m.n_layers, default_positions(ids, 0, positions), key_padding, None, 0)


def lm_step(m, cache, ids, key_padding=None, positions=None):
    p = m.tree()
    D = p["embed"].shape[1]
    if cache is None:
        cache = new_cache(m, ids.shape[0], p["layer0_attn_wk"].shape[1] // (D // m.n_heads), D // m.n_heads, p["embed"].dtype, m.n_layers)
    start = cache["length"]
    out = lm(p, ids, m.n_heads, m.n_layers, default_positions(ids, start, positions), key_padding, cache["layers"], start)
    return out, {"layers": cache["layers"], "length": start + ids.shape[1]}


def rope_forward(m, x, positions):
    positions = positions if positions.dim() == 2 else positions[None]
    return apply_rope(x, rope_angles(positions, x.shape[-1]))


def attn_map(prefix, canonical):
    return {f"{canonical}{n}.weight": Param(f"params.{prefix}w{n}", permute=(1, 0)) for n in "qkvo"}


def mlp_map(prefix, canonical):
    return {f"{canonical}{n}.weight": Param(f"params.{prefix}w_{n}", permute=(1, 0)) for n in ("gate", "up", "down")}


def block_map(prefix, canonical):
    out = attn_map(prefix + "attn_", canonical + "self_attn.") | mlp_map(prefix + "mlp_", canonical + "ffn.")
    out[canonical + "norm1.weight"] = f"params.{prefix}attn_norm"
    out[canonical + "norm2.weight"] = f"params.{prefix}mlp_norm"
    return out


def lm_map(cfg):
    out = {"embedding.weight": "params.embed", "norm.weight": "params.final_norm"}
    out["lm_head.weight"] = Param("params.unembed", permute=(1, 0))
    for i in range(cfg.n_layers):
        out |= block_map(f"layer{i}_", f"layers.{i}.")
    return out


CONVENTIONS = dataclasses.replace(LLAMA, rope_layout="interleaved")
FIXED = {"n_kv_heads": 2, "attention_bias": False, "ffn_bias": False, "tie_weights": False}

adapter = TorchModuleAdapter("pytree-gqa", [
    TorchEntry("rms_norm", make=make(lambda g, c: {"scale": torch.ones(c.d_model, dtype=torch.float64)}),
               forward=lambda m, x: rms_norm(x, m.params["scale"]),
               param_map={"weight": "params.scale"}, conventions=CONVENTIONS, config=FIXED),
    TorchEntry("rope", make=make(lambda g, c: {}), forward=rope_forward, conventions=CONVENTIONS, config=FIXED),
    TorchEntry("gated_ffn", make=make(init_mlp), forward=lambda m, x: mlp(m.tree(), "", x),
               param_map=mlp_map("", ""), conventions=CONVENTIONS, config=FIXED),
    TorchEntry("causal_self_attention", make=make(init_attention), forward=attn_forward, step=attn_step,
               derives_positions=True, param_map=attn_map("", ""), conventions=CONVENTIONS, config=FIXED),
    TorchEntry("decoder_block", make=make(init_block), forward=block_forward, step=block_step,
               derives_positions=True, param_map=block_map("", ""), conventions=CONVENTIONS, config=FIXED),
    TorchEntry("causal_lm", make=make(init_lm), forward=lm_forward, step=lm_step,
               derives_positions=True, param_map=lm_map, conventions=CONVENTIONS, config=FIXED),
])
