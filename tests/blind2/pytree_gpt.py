# fmt: off
# ruff: noqa: E501
"""A GPT-2 ported from a JAX codebase: the parameters are one flat pytree (an
``nn.ParameterDict`` keyed ``"h0.attn.c_attn.w"`` style with "." spelled "_"), the model is
pure functions over that dict, called through ``torch.func.functional_call`` so the same
functions run on any parameter set; the KV cache is a pytree too (a dict of per-layer key
and value tensors grown with ``torch.cat``, and a length). Weights are stored ``[in, out]``
(``x @ w + b``), LayerNorm and the tanh GELU are written out, learned positions, a tied head.

Correct as written; tests/blind2/bugs.json lists one-line bugs of it (the blind benchmark).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Config, Conventions

LN_EPS = 1e-5
# The dtype the softmax is formed in; None: the scores' own (float32 for 16-bit inputs).
# torch.float32 computes it in float32 always, as transformers' eager attention does (declared).
SOFTMAX_DTYPE = None


def upcast(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def layer_norm(x, g, b, eps=LN_EPS):
    h = x.to(upcast(x.dtype))
    mean = h.mean(-1, keepdim=True)
    var = ((h - mean) ** 2).mean(-1, keepdim=True)
    h = (h - mean) * torch.rsqrt(var + eps)
    return (h * g + b).to(x.dtype)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def softmax(scores):
    """jax.nn.softmax written out: shift by the row maximum, exponentiate, normalise."""
    shifted = scores - scores.amax(-1, keepdim=True)
    e = shifted.exp()
    return e / e.sum(-1, keepdim=True)


def linear(x, w, b):
    return x @ w + b


def mlp(p, prefix, x):
    h = gelu_new(linear(x, p[f"{prefix}c_fc_w"], p[f"{prefix}c_fc_b"]))
    return linear(h, p[f"{prefix}c_proj_w"], p[f"{prefix}c_proj_b"])


def split_heads(x, n_head):
    b, t, c = x.shape
    return x.reshape(b, t, n_head, c // n_head).permute(0, 2, 1, 3)


def merge_heads(x):
    b, h, t, d = x.shape
    return x.permute(0, 2, 1, 3).reshape(b, t, h * d)


def causal_keep(n_new, n_total, key_padding, device):
    """Keep-mask [B|1, 1, n_new, n_total]: the new tokens are the last n_new of n_total."""
    hidden = torch.triu(torch.ones(n_new, n_total, dtype=torch.bool, device=device), diagonal=n_total - n_new + 1)
    keep = ~hidden[None, None]
    if key_padding is not None:
        keep = keep & key_padding[:, None, None, :]
    return keep


def attention(p, prefix, x, n_head, keep, layer_cache):
    d_model = x.shape[-1]
    qkv = linear(x, p[f"{prefix}c_attn_w"], p[f"{prefix}c_attn_b"])
    q, k, v = qkv.split(d_model, dim=-1)
    q, k, v = split_heads(q, n_head), split_heads(k, n_head), split_heads(v, n_head)
    if layer_cache is not None:
        if "k" in layer_cache:
            k, v = (torch.cat([layer_cache[name], new], dim=2) for name, new in (("k", k), ("v", v)))
        layer_cache["k"], layer_cache["v"] = k, v
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    scores = scores.to(SOFTMAX_DTYPE or upcast(scores.dtype))
    scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    weights = softmax(scores).to(v.dtype)
    out = merge_heads(weights @ v)
    return linear(out, p[f"{prefix}c_proj_w"], p[f"{prefix}c_proj_b"])


def block(p, prefix, x, n_head, keep, layer_cache):
    a = layer_norm(x, p[f"{prefix}ln_1_g"], p[f"{prefix}ln_1_b"])
    x = x + attention(p, f"{prefix}attn_", a, n_head, keep, layer_cache)
    m = layer_norm(x, p[f"{prefix}ln_2_g"], p[f"{prefix}ln_2_b"])
    x = x + mlp(p, f"{prefix}mlp_", m)
    return x


def positions_for(start, n, batch, key_padding, device):
    """Position ids [B, n]: counted from the cache's length, or from each row's first real
    token when a padding mask says where they are."""
    if key_padding is None:
        return torch.arange(start, start + n, device=device).expand(batch, n)
    return (key_padding.long().cumsum(-1) - 1).clamp(min=0)[:, start : start + n]


def gpt_forward(p, ids, n_head, n_layer, key_padding=None, positions=None, cache=None):
    b, n = ids.shape
    start = cache["length"] if cache is not None else 0
    if positions is None:
        positions = positions_for(start, n, b, key_padding, ids.device)
    x = p["wte"][ids] + p["wpe"][positions]
    keep = causal_keep(n, start + n, key_padding, ids.device)
    for i in range(n_layer):
        layer_cache = cache["layers"][i] if cache is not None else None
        x = block(p, f"h{i}_", x, n_head, keep, layer_cache)
    if cache is not None:
        cache["length"] = start + n
    x = layer_norm(x, p["ln_f_g"], p["ln_f_b"])
    return x @ p["wte"].T


def block_forward(p, x, n_head, key_padding=None, positions=None, cache=None):
    start = cache["length"] if cache is not None else 0
    n = x.shape[1]
    keep = causal_keep(n, start + n, key_padding, x.device)
    out = block(p, "h0_", x, n_head, keep, cache["layers"][0] if cache is not None else None)
    if cache is not None:
        cache["length"] = start + n
    return out


def attention_forward(p, x, n_head, key_padding=None, positions=None, cache=None):
    start = cache["length"] if cache is not None else 0
    n = x.shape[1]
    keep = causal_keep(n, start + n, key_padding, x.device)
    out = attention(p, "h0_attn_", x, n_head, keep, cache["layers"][0] if cache is not None else None)
    if cache is not None:
        cache["length"] = start + n
    return out


def init_params(c: Config, what: str) -> dict[str, torch.Tensor]:
    d, f = c.d_model, c.d_ff
    p: dict[str, torch.Tensor] = {}

    def dense(name, n_in, n_out):
        p[f"{name}_w"] = torch.randn(n_in, n_out) / math.sqrt(n_in)
        p[f"{name}_b"] = torch.randn(n_out) * 0.1

    def norm(name):
        p[f"{name}_g"] = 1.0 + 0.1 * torch.randn(d)
        p[f"{name}_b"] = 0.1 * torch.randn(d)

    layers = c.n_layers if what == "lm" else 1
    for i in range(layers):
        dense(f"h{i}_attn_c_attn", d, 3 * d)
        dense(f"h{i}_attn_c_proj", d, d)
        if what == "attn":
            continue
        norm(f"h{i}_ln_1")
        norm(f"h{i}_ln_2")
        dense(f"h{i}_mlp_c_fc", d, f)
        dense(f"h{i}_mlp_c_proj", f, d)
    if what == "lm":
        p["wte"] = torch.randn(c.vocab_size, d) * 0.5
        p["wpe"] = torch.randn(c.max_len, d) * 0.1
        norm("ln_f")
    return p


class Functional(nn.Module):
    """Holds the pytree as an nn.ParameterDict; ``fn`` is called with it via functional_call."""

    def __init__(self, c: Config, what: str, fn):
        super().__init__()
        self.params = nn.ParameterDict({k: nn.Parameter(v) for k, v in init_params(c, what).items()})
        self.fn = fn
        self.n_head = c.n_heads
        self.n_layer = c.n_layers

    def forward(self, *args, **kwargs):
        return self.fn(dict(self.params), *args, **kwargs)

    def functional(self, *args, **kwargs):
        """The model called through functional_call with its own pytree (as in the JAX code)."""
        tree = {f"params.{k}": v for k, v in self.params.items()}
        return torch.func.functional_call(self, tree, args, kwargs)


def new_cache(n_layers):
    return {"length": 0, "layers": [{} for _ in range(n_layers)]}


# ---------------------------------------------------------------- the adapter

def attn_map(ours, theirs, c):
    d = c.d_model
    mapping = {}
    for i, name in enumerate("qkv"):
        mapping[f"{ours}{name}.weight"] = Param(f"params.{theirs}c_attn_w", slice=(1, i * d, (i + 1) * d), permute=(1, 0))
        mapping[f"{ours}{name}.bias"] = Param(f"params.{theirs}c_attn_b", slice=(0, i * d, (i + 1) * d))
    mapping[f"{ours}o.weight"] = Param(f"params.{theirs}c_proj_w", permute=(1, 0))
    mapping[f"{ours}o.bias"] = f"params.{theirs}c_proj_b"
    return mapping


def mlp_map(ours, theirs):
    return {
        f"{ours}fc1.weight": Param(f"params.{theirs}c_fc_w", permute=(1, 0)), f"{ours}fc1.bias": f"params.{theirs}c_fc_b",
        f"{ours}fc2.weight": Param(f"params.{theirs}c_proj_w", permute=(1, 0)), f"{ours}fc2.bias": f"params.{theirs}c_proj_b",
    }


def block_map(ours, theirs, c):
    mapping = attn_map(f"{ours}self_attn.", f"{theirs}attn_", c) | mlp_map(f"{ours}ffn.", f"{theirs}mlp_")
    for canonical, mine in (("norm1", "ln_1"), ("norm2", "ln_2")):
        mapping[f"{ours}{canonical}.weight"] = f"params.{theirs}{mine}_g"
        mapping[f"{ours}{canonical}.bias"] = f"params.{theirs}{mine}_b"
    return mapping


def lm_map(c):
    mapping = {"embedding.weight": "params.wte", "pos_embedding.weight": "params.wpe",
               "norm.weight": "params.ln_f_g", "norm.bias": "params.ln_f_b"}
    for i in range(c.n_layers):
        mapping |= block_map(f"layers.{i}.", f"h{i}_", c)
    return mapping


class LayerNormOnly(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.g = nn.Parameter(1.0 + 0.1 * torch.randn(c.d_model))
        self.b = nn.Parameter(0.1 * torch.randn(c.d_model))

    def forward(self, x):
        return layer_norm(x, self.g, self.b)


class MlpOnly(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        tree = init_params(c, "block")
        self.params = nn.ParameterDict({k: nn.Parameter(v) for k, v in tree.items() if k.startswith("h0_mlp_")})

    def forward(self, x):
        return mlp(dict(self.params), "h0_mlp_", x)


def make_step(fn_kind):
    def step(module, cache, key_padding=None, positions=None, **inputs):
        (main,) = inputs.values()
        if cache is None:
            cache = new_cache(module.n_layer if fn_kind == "lm" else 1)
        if fn_kind == "lm":
            out = module.functional(main, module.n_head, module.n_layer, key_padding=key_padding, positions=positions, cache=cache)
        else:
            out = module.functional(main, module.n_head, key_padding=key_padding, positions=positions, cache=cache)
        return out, cache

    return step


# finfo.min through masked_fill: a query with no key left attends evenly to every key
GPT2 = Conventions(norm_placement="pre", activation="gelu_tanh", embedding_scale="none", fully_masked_rows="uniform",
                   float32_steps=("softmax",) if SOFTMAX_DTYPE == torch.float32 else ())

adapter = TorchModuleAdapter("pytree-gpt", [
    TorchEntry("layer_norm", make=LayerNormOnly, forward=lambda m, x: m(x), param_map={"weight": "g", "bias": "b"}),
    TorchEntry("ffn", make=MlpOnly, forward=lambda m, x: m(x), param_map=mlp_map("", "h0_mlp_"),
               conventions=Conventions(activation="gelu_tanh")),
    TorchEntry("causal_self_attention", make=lambda c: Functional(c, "attn", attention_forward),
               forward=lambda m, x, key_padding=None, positions=None: m.functional(x, m.n_head, key_padding=key_padding, positions=positions),
               param_map=lambda c: attn_map("", "h0_attn_", c), conventions=GPT2, step=make_step("block"),
               derives_positions=True, supports=ConfigSpace(fixed={"n_kv_heads": None})),
    TorchEntry("decoder_block", make=lambda c: Functional(c, "block", block_forward),
               forward=lambda m, x, key_padding=None, positions=None: m.functional(x, m.n_head, key_padding=key_padding, positions=positions),
               param_map=lambda c: block_map("", "h0_", c), conventions=GPT2, step=make_step("block"),
               derives_positions=True, supports=ConfigSpace(fixed={"n_kv_heads": None})),
    TorchEntry("causal_lm", make=lambda c: Functional(c, "lm", gpt_forward),
               forward=lambda m, ids, key_padding=None, positions=None: m.functional(ids, m.n_head, m.n_layer, key_padding=key_padding, positions=positions),
               param_map=lm_map, conventions=GPT2, step=make_step("lm"), derives_positions=True,
               supports=ConfigSpace(fixed={"n_kv_heads": None}, tied=True)),
])
