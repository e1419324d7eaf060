# fmt: off
# ruff: noqa
"""An encoder as lucidrains' x-transformers writes it (`x_transformers.py`: `Encoder` /
`AttentionLayers`): heads split and merged by reshape / permute (einops is not installed here;
x-transformers uses `rearrange(t, 'b n (h d) -> b h n d')`), pre-norm, `ScaleNorm`
(`use_scalenorm = True`, offered as the scale_norm subject), a GELU `FeedForward`, a key-padding
`mask` (True = keep) filled with `max_neg_value(t) = -finfo.max`, a final norm."""
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn, einsum


def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


def max_neg_value(tensor):
    return -torch.finfo(tensor.dtype).max


class ScaleNorm(nn.Module):
    def __init__(self, dim, eps = 1e-5):
        super().__init__()
        self.eps = eps
        self.g = nn.Parameter(torch.ones(1) * (dim ** 0.5))

    def forward(self, x):
        norm = torch.norm(x, dim = -1, keepdim = True)
        return x / norm.clamp(min = self.eps) * self.g


class Residual(nn.Module):
    def forward(self, x, residual):
        return x + residual


class FeedForward(nn.Module):
    def __init__(self, dim, dim_out = None, mult = 4, dropout = 0.):
        super().__init__()
        inner_dim = int(dim * mult)
        dim_out = default(dim_out, dim)
        project_in = nn.Sequential(nn.Linear(dim, inner_dim), nn.GELU())
        self.net = nn.Sequential(
            project_in,
            nn.Dropout(dropout),
            nn.Linear(inner_dim, dim_out)
        )

    def forward(self, x):
        return self.net(x)


class Attention(nn.Module):
    def __init__(self, dim, dim_head = 64, heads = 8, causal = False, dropout = 0.):
        super().__init__()
        self.scale = dim_head ** -0.5
        self.heads = heads
        self.causal = causal
        inner_dim = dim_head * heads
        self.to_q = nn.Linear(dim, inner_dim, bias = False)
        self.to_k = nn.Linear(dim, inner_dim, bias = False)
        self.to_v = nn.Linear(dim, inner_dim, bias = False)
        self.dropout = nn.Dropout(dropout)
        self.to_out = nn.Linear(inner_dim, dim, bias = False)

    def forward(self, x, context = None, mask = None, context_mask = None, value = None, causal = None):
        b, n, _, h = *x.shape, self.heads
        kv_input = default(context, x)
        causal = default(causal, self.causal)

        q = self.to_q(x)
        k = self.to_k(kv_input)
        v = self.to_v(default(value, kv_input))

        # rearrange(t, 'b n (h d) -> b h n d', h = h)
        q, k, v = map(lambda t: t.reshape(t.shape[0], t.shape[1], h, -1).permute(0, 2, 1, 3), (q, k, v))

        input_mask = context_mask if exists(context) else mask

        dots = einsum('b h i d, b h j d -> b h i j', q, k) * self.scale
        mask_value = max_neg_value(dots)

        if exists(input_mask):
            input_mask = input_mask[:, None, None, :]
            dots.masked_fill_(~input_mask, mask_value)

        if causal:
            i, j = dots.shape[-2:]
            causal_mask = torch.ones((i, j), dtype = torch.bool, device = dots.device).triu(j - i + 1)
            dots.masked_fill_(causal_mask, mask_value)

        attn = dots.softmax(dim = -1)
        attn = self.dropout(attn)

        out = einsum('b h i j, b h j d -> b h i d', attn, v)
        # rearrange(out, 'b h n d -> b n (h d)')
        out = out.permute(0, 2, 1, 3).reshape(out.shape[0], out.shape[2], -1)
        return self.to_out(out)


class AttentionLayers(nn.Module):
    def __init__(self, dim, depth, heads = 8, causal = False, use_scalenorm = False, ff_mult = 4,
                 attn_dropout = 0., ff_dropout = 0., final_norm = True):
        super().__init__()
        self.dim = dim
        self.depth = depth
        self.layers = nn.ModuleList([])
        self.causal = causal

        norm_class = ScaleNorm if use_scalenorm else nn.LayerNorm
        norm_fn = partial(norm_class, dim)
        self.pre_norm = True

        default_block = ('a', 'f')
        layer_types = default_block * depth
        self.layer_types = layer_types

        for layer_type in self.layer_types:
            if layer_type == 'a':
                layer = Attention(dim, dim_head = dim // heads, heads = heads, causal = causal, dropout = attn_dropout)
            elif layer_type == 'f':
                layer = FeedForward(dim, mult = ff_mult, dropout = ff_dropout)
            residual_fn = Residual()
            self.layers.append(nn.ModuleList([norm_fn(), layer, residual_fn]))

        self.final_norm = norm_fn() if final_norm else nn.Identity()

    def forward(self, x, mask = None, causal = None):
        for ind, (layer_type, (norm, block, residual_fn)) in enumerate(zip(self.layer_types, self.layers)):
            residual = x

            if self.pre_norm:
                x = norm(x)

            if layer_type == 'a':
                out = block(x, mask = mask, causal = causal)
            elif layer_type == 'f':
                out = block(x)

            x = residual_fn(out, residual)

        x = self.final_norm(x)
        return x


class Encoder(AttentionLayers):
    def __init__(self, **kwargs):
        assert 'causal' not in kwargs, 'cannot set causality on encoder'
        super().__init__(causal = False, **kwargs)


# ---- the adapter
from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions

XT = Conventions(
    norm_placement="pre", activation="gelu", causal_alignment="bottom_right",
    fully_masked_rows="uniform",
)


def make_encoder(config, depth, final_norm = True):
    return Encoder(dim = config.d_model, depth = depth, heads = config.n_heads,
                   ff_mult = config.d_ff / config.d_model, final_norm = final_norm)


def _fwd_stack(enc, x, key_padding = None, causal = None):
    return enc(x, mask = key_padding, causal = bool(causal) if causal is not None else None)


def _fwd_mha(attn, query, key, value, key_padding = None, causal = None):
    return attn(query, context = key, value = value, context_mask = key_padding,
                causal = bool(causal) if causal is not None else None)


def _layer_map(prefix, mine_attn, mine_ff):
    m = {}
    for c, x in (("q", "to_q"), ("k", "to_k"), ("v", "to_v"), ("o", "to_out")):
        m[f"{prefix}self_attn.{c}.weight"] = f"{mine_attn}.1.{x}.weight"
    for p in ("weight", "bias"):
        m[f"{prefix}norm1.{p}"] = f"{mine_attn}.0.{p}"
        m[f"{prefix}norm2.{p}"] = f"{mine_ff}.0.{p}"
        m[f"{prefix}ffn.fc1.{p}"] = f"{mine_ff}.1.net.0.0.{p}"
        m[f"{prefix}ffn.fc2.{p}"] = f"{mine_ff}.1.net.2.{p}"
    return m


def _encoder_map(config):
    m = {}
    for i in range(config.n_layers):
        m |= _layer_map(f"layers.{i}.", f"layers.{2 * i}", f"layers.{2 * i + 1}")
    m |= {"norm.weight": "final_norm.weight", "norm.bias": "final_norm.bias"}
    return m


NO_ATTN_BIAS = {"attention_bias": False}
SPACE = ConfigSpace(split_heads=True)

adapter = TorchModuleAdapter("x-transformers-encoder", [
    TorchEntry(
        "scale_norm",
        make=lambda config: ScaleNorm(config.d_model),
        forward=lambda norm, x: norm(x),
        param_map={"weight": "g"},
    ),
    TorchEntry(
        "mha",
        make=lambda config: Attention(config.d_model, dim_head = config.d_model // config.n_heads, heads = config.n_heads),
        forward=_fwd_mha,
        param_map={f"{c}.weight": f"{x}.weight" for c, x in (("q", "to_q"), ("k", "to_k"), ("v", "to_v"), ("o", "to_out"))},
        conventions=XT, config=NO_ATTN_BIAS, supports=SPACE,
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: make_encoder(config, 1, final_norm = False),
        forward=_fwd_stack,
        param_map=_layer_map("", "layers.0", "layers.1"),
        conventions=XT, config=NO_ATTN_BIAS, supports=SPACE,
    ),
    TorchEntry(
        "encoder",
        make=lambda config: make_encoder(config, config.n_layers),
        forward=_fwd_stack,
        param_map=_encoder_map,
        conventions=XT, config=NO_ATTN_BIAS, supports=SPACE,
    ),
])
