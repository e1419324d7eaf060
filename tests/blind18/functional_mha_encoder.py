# fmt: off
# ruff: noqa
"""A BERT-style encoder written on `torch.nn.functional.multi_head_attention_forward`.

No attention module: every layer is a dict of tensors (`in_proj_weight [3D, D]`,
`in_proj_bias`, `out_proj_weight`, `out_proj_bias`, the attention output LayerNorm, BERT's
`intermediate` and `output` dense layers, the output LayerNorm) built from the canonical state
(q, k and v fused into `in_proj_*` by `fuse_canonical`), and pure functions that read it.
The attention is `F.multi_head_attention_forward` called directly, on sequence-first tensors
`[L, B, D]` as that function wants, with `key_padding_mask` (True = padding),
`need_weights=False`. Post-LN as BERT (`LayerNorm(x + sublayer(x))`), exact GELU,
`F.layer_norm` with BERT's explicit eps 1e-12, dropout 0.1 (`F.dropout(..., training)`).
Positions: a sinusoidal table (sin at even, cos at odd columns, base 10000), offered as its
own subject (the encoder itself takes embedded inputs).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

LN_EPS = 1e-12
HIDDEN_DROPOUT = 0.1
ATTENTION_DROPOUT = 0.1
LAYER_KEYS = (
    "in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias",
    "attn_ln_weight", "attn_ln_bias",
    "intermediate_weight", "intermediate_bias", "output_weight", "output_bias",
    "out_ln_weight", "out_ln_bias",
)


def sinusoidal_table(max_len, d_model):
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def fuse_canonical(state, prefix=""):
    """One layer's dict from canonical tensors (`self_attn.q.weight`, ..., `norm2.bias`)."""
    s = lambda name: state[prefix + name]
    return {
        "in_proj_weight": torch.cat([s("self_attn.q.weight"), s("self_attn.k.weight"), s("self_attn.v.weight")], dim=0),
        "in_proj_bias": torch.cat([s("self_attn.q.bias"), s("self_attn.k.bias"), s("self_attn.v.bias")], dim=0),
        "out_proj_weight": s("self_attn.o.weight"),
        "out_proj_bias": s("self_attn.o.bias"),
        "attn_ln_weight": s("norm1.weight"),
        "attn_ln_bias": s("norm1.bias"),
        "intermediate_weight": s("ffn.fc1.weight"),
        "intermediate_bias": s("ffn.fc1.bias"),
        "output_weight": s("ffn.fc2.weight"),
        "output_bias": s("ffn.fc2.bias"),
        "out_ln_weight": s("norm2.weight"),
        "out_ln_bias": s("norm2.bias"),
    }


def init_canonical(d_model, d_ff, generator, prefix=""):
    """BERT's initialisation (normal, std 0.02; zero biases; unit LayerNorm gains)."""
    n = lambda *shape: torch.randn(*shape, generator=generator, dtype=torch.float64) * 0.02
    state = {}
    for c in "qkvo":
        state[f"{prefix}self_attn.{c}.weight"] = n(d_model, d_model)
        state[f"{prefix}self_attn.{c}.bias"] = torch.zeros(d_model, dtype=torch.float64)
    state[f"{prefix}ffn.fc1.weight"] = n(d_ff, d_model)
    state[f"{prefix}ffn.fc1.bias"] = torch.zeros(d_ff, dtype=torch.float64)
    state[f"{prefix}ffn.fc2.weight"] = n(d_model, d_ff)
    state[f"{prefix}ffn.fc2.bias"] = torch.zeros(d_model, dtype=torch.float64)
    for norm in ("norm1", "norm2"):
        state[f"{prefix}{norm}.weight"] = torch.ones(d_model, dtype=torch.float64)
        state[f"{prefix}{norm}.bias"] = torch.zeros(d_model, dtype=torch.float64)
    return state


def attention(p, query, key, value, num_heads, key_padding_mask=None, attn_mask=None, training=False):
    """Batch-first in and out; F.multi_head_attention_forward in between, sequence-first."""
    query, key, value = (t.transpose(0, 1) for t in (query, key, value))
    attn_output, _ = F.multi_head_attention_forward(
        query, key, value,
        embed_dim_to_check=query.shape[-1],
        num_heads=num_heads,
        in_proj_weight=p["in_proj_weight"],
        in_proj_bias=p["in_proj_bias"],
        bias_k=None,
        bias_v=None,
        add_zero_attn=False,
        dropout_p=ATTENTION_DROPOUT,
        out_proj_weight=p["out_proj_weight"],
        out_proj_bias=p["out_proj_bias"],
        training=training,
        key_padding_mask=key_padding_mask,
        need_weights=False,
        attn_mask=attn_mask,
    )
    return attn_output.transpose(0, 1)


def feed_forward(p, x, training=False):
    h = F.linear(x, p["intermediate_weight"], p["intermediate_bias"])
    h = F.gelu(h)
    h = F.linear(h, p["output_weight"], p["output_bias"])
    return F.dropout(h, HIDDEN_DROPOUT, training)


def encoder_layer(p, x, num_heads, key_padding_mask=None, attn_mask=None, training=False):
    width = (x.shape[-1],)
    h = attention(p, x, x, x, num_heads, key_padding_mask, attn_mask, training)
    h = F.dropout(h, HIDDEN_DROPOUT, training)
    x = F.layer_norm(x + h, width, p["attn_ln_weight"], p["attn_ln_bias"], eps=LN_EPS)
    h = feed_forward(p, x, training)
    x = F.layer_norm(x + h, width, p["out_ln_weight"], p["out_ln_bias"], eps=LN_EPS)
    return x


def encoder(layers, x, num_heads, key_padding_mask=None, attn_mask=None, training=False):
    for p in layers:
        x = encoder_layer(p, x, num_heads, key_padding_mask, attn_mask, training)
    return x


def padding_mask(keep):
    """The keep-mask (True = a real token) as F.multi_head_attention_forward's key_padding_mask."""
    return None if keep is None else ~torch.as_tensor(np.asarray(keep), dtype=torch.bool)


def causal_mask(n_queries, n_keys):
    """True above the diagonal: query i may not attend key j > i."""
    return torch.triu(torch.ones(n_queries, n_keys, dtype=torch.bool), diagonal=1)


# ---- the holders: nn.Modules whose only content is the parameter dicts (the adapter's view)


class ParamDictModule(nn.Module):
    def __init__(self, dicts, num_heads):
        super().__init__()
        self.layers = nn.ModuleList([nn.ParameterDict({k: nn.Parameter(v) for k, v in d.items()}) for d in dicts])
        self.num_heads = num_heads


class SinusoidalPE(nn.Module):
    def __init__(self, d_model, max_len):
        super().__init__()
        self.register_buffer("pe", sinusoidal_table(max_len, d_model))

    def forward(self, positions):
        return self.pe[positions]


def make_layers(config, n_layers):
    gen = torch.Generator().manual_seed(0)
    dicts = []
    for _ in range(n_layers):
        dicts.append(fuse_canonical(init_canonical(config.d_model, config.d_ff, gen)))
    return ParamDictModule(dicts, config.n_heads)


def mha_forward(module, query, key, value, key_padding=None, causal=None):
    mask = causal_mask(query.shape[1], key.shape[1]) if causal is not None and bool(causal) else None
    p = module.layers[0]
    return attention(p, query, key, value, module.num_heads, padding_mask(key_padding), mask, module.training)


def layer_forward(module, x, key_padding=None, causal=None):
    mask = causal_mask(x.shape[1], x.shape[1]) if causal is not None and bool(causal) else None
    return encoder_layer(module.layers[0], x, module.num_heads, padding_mask(key_padding), mask, module.training)


def encoder_forward(module, x, key_padding=None, causal=None):
    mask = causal_mask(x.shape[1], x.shape[1]) if causal is not None and bool(causal) else None
    return encoder(list(module.layers), x, module.num_heads, padding_mask(key_padding), mask, module.training)


def pe_forward(module, positions):
    return module(torch.as_tensor(np.asarray(positions), dtype=torch.long))


# ---- the adapter

from tck.adapters import Chunk, ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def layer_map(prefix, where):
    out = {}
    for i, c in enumerate("qkv"):
        out[f"{prefix}self_attn.{c}.weight"] = Chunk(f"{where}in_proj_weight", i, 3)
        out[f"{prefix}self_attn.{c}.bias"] = Chunk(f"{where}in_proj_bias", i, 3)
    out[f"{prefix}self_attn.o.weight"] = f"{where}out_proj_weight"
    out[f"{prefix}self_attn.o.bias"] = f"{where}out_proj_bias"
    for canon, mine in (("norm1", "attn_ln"), ("norm2", "out_ln"), ("ffn.fc1", "intermediate"), ("ffn.fc2", "output")):
        out[f"{prefix}{canon}.weight"] = f"{where}{mine}_weight"
        out[f"{prefix}{canon}.bias"] = f"{where}{mine}_bias"
    return out


def mha_map(config):
    return {k.removeprefix("self_attn."): v for k, v in layer_map("", "layers.0.").items() if k.startswith("self_attn.")}


def encoder_map(config):
    out = {}
    for i in range(config.n_layers):
        out |= layer_map(f"layers.{i}.", f"layers.{i}.")
    return out


def make_mha(config):
    module = make_layers(config, 1)
    for key in LAYER_KEYS[4:]:
        del module.layers[0][key]
    return module


CONVENTIONS = Conventions(norm_placement="post", activation="gelu", eps=LN_EPS)
MHA_CONVENTIONS = Conventions()
BIASES = {"attention": True, "ffn": True, "norm": True}
SPACE = ConfigSpace(split_heads=True, biases=BIASES)

adapter = TorchModuleAdapter("functional_mha_encoder", [
    TorchEntry(
        "sinusoidal_pe",
        make=lambda config: SinusoidalPE(config.d_model, config.max_len),
        forward=pe_forward,
    ),
    TorchEntry(
        "mha",
        make=make_mha,
        forward=mha_forward,
        param_map=mha_map,
        conventions=MHA_CONVENTIONS,
        supports=SPACE,
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: make_layers(config, 1),
        forward=layer_forward,
        param_map=lambda config: layer_map("", "layers.0."),
        conventions=CONVENTIONS,
        supports=SPACE,
    ),
    TorchEntry(
        "encoder",
        make=lambda config: make_layers(config, config.n_layers),
        forward=encoder_forward,
        param_map=encoder_map,
        conventions=CONVENTIONS,
        supports=SPACE,
    ),
])
