# fmt: off
# ruff: noqa
"""A ViT written in plain numpy (float64 arrays), weights stored numpy-style as [in, out]
(`x @ W + b`). Patches are cut with `np.lib.stride_tricks.sliding_window_view`; attention runs a
Python loop over heads; LayerNorm, the exact GELU (erf from `math.erf`, vectorised) and the
softmax are written by hand; a class token, a learned position table, a head on the class
token. The adapter keeps the weights in float64 torch Parameters (so the kit can read and load
them) and converts tensors to numpy arrays at the boundary.
"""
import math

import numpy as np
import torch
import torch.nn as nn

_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def layer_norm(x, gamma, beta, eps=1e-6):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def softmax(scores):
    shifted = scores - scores.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)


def patchify(images, p):
    """[B, C, H, W] -> [B, N, C*p*p]: row-major over the grid, (c, y, x) inside a patch."""
    B, C, H, W = images.shape
    windows = np.lib.stride_tricks.sliding_window_view(images, (p, p), axis=(2, 3))[:, :, ::p, ::p]
    windows = windows.transpose(0, 2, 3, 1, 4, 5)  # [B, H/p, W/p, C, p, p]
    return windows.reshape(B, (H // p) * (W // p), C * p * p)


def attention(x, P, n_heads, keep=None):
    """x [B, L, D]; keep [B or 1, L, L] (True = may attend) or None."""
    B, L, D = x.shape
    dh = D // n_heads
    q = x @ P["wq"] + P["bq"]
    k = x @ P["wk"] + P["bk"]
    v = x @ P["wv"] + P["bv"]
    heads = []
    for h in range(n_heads):
        cols = slice(h * dh, (h + 1) * dh)
        scores = q[:, :, cols] @ k[:, :, cols].transpose(0, 2, 1) / math.sqrt(dh)
        if keep is not None:
            scores = np.where(keep, scores, -np.inf)
        weights = softmax(scores)
        heads.append(weights @ v[:, :, cols])
    merged = np.concatenate(heads, axis=-1)
    return merged @ P["wo"] + P["bo"]


def mlp(x, P):
    hidden = gelu(x @ P["w1"] + P["b1"])
    return hidden @ P["w2"] + P["b2"]


def block(x, P, n_heads, keep=None):
    """Pre-LN: x + MSA(LN(x)), then x + MLP(LN(x))."""
    x = x + attention(layer_norm(x, P["ln1_g"], P["ln1_b"]), P, n_heads, keep)
    x = x + mlp(layer_norm(x, P["ln2_g"], P["ln2_b"]), P)
    return x


def encoder(x, layers, norm_g, norm_b, n_heads, keep=None):
    for P in layers:
        x = block(x, P, n_heads, keep)
    return layer_norm(x, norm_g, norm_b)


def patch_embed(images, w, b, p, channels):
    if images.ndim != 4 or images.shape[1] != channels:
        raise ValueError(f"expected images [B, {channels}, H, W], got {images.shape}")
    if images.shape[2] % p or images.shape[3] % p:
        raise ValueError(f"image size {images.shape[2:]} is not a multiple of the patch size {p}")
    return patchify(images, p) @ w + b


def vit(images, V, n_heads, p, image_size, channels):
    if images.ndim != 4 or images.shape[2:] != (image_size, image_size):
        raise ValueError(f"expected {image_size}x{image_size} images, got {images.shape}")
    tokens = patch_embed(images, V["patch_w"], V["patch_b"], p, channels)
    B = tokens.shape[0]
    cls = np.broadcast_to(V["cls_token"], (B, 1, tokens.shape[-1]))
    x = np.concatenate([cls, tokens], axis=1)
    x = x + V["pos_embed"]
    x = encoder(x, V["layers"], V["norm_g"], V["norm_b"], n_heads)
    pooled = x[:, 0]
    return pooled @ V["head_w"] + V["head_b"]


# ---- the torch side: float64 Parameters, read as numpy arrays at every call

BLOCK_SHAPES = lambda D, F: {
    "ln1_g": (D,), "ln1_b": (D,), "wq": (D, D), "bq": (D,), "wk": (D, D), "bk": (D,),
    "wv": (D, D), "bv": (D,), "wo": (D, D), "bo": (D,), "ln2_g": (D,), "ln2_b": (D,),
    "w1": (D, F), "b1": (F,), "w2": (F, D), "b2": (D,),
}


def as_numpy(t):
    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else t


class Holder(nn.Module):
    def __init__(self, shapes):
        super().__init__()
        for name, shape in shapes.items():
            init = torch.ones(shape) if name.endswith("_g") else torch.randn(shape) * 0.02
            setattr(self, name, nn.Parameter(init.to(torch.float64)))

    def arrays(self):
        return {name: as_numpy(p) for name, p in self.named_parameters()}


class NumpyEncoderLayer(nn.Module):
    def __init__(self, D, F, n_heads):
        super().__init__()
        self.P = Holder(BLOCK_SHAPES(D, F))
        self.n_heads = n_heads

    def forward(self, x, keep=None):
        return torch.from_numpy(block(as_numpy(x), self.P.arrays(), self.n_heads, as_numpy(keep)))


class NumpyEncoder(nn.Module):
    def __init__(self, D, F, n_heads, n_layers):
        super().__init__()
        self.layers = nn.ModuleList(Holder(BLOCK_SHAPES(D, F)) for _ in range(n_layers))
        self.norm = Holder({"g": (D,), "b": (D,)})
        self.n_heads = n_heads

    def forward(self, x, keep=None):
        layers = [P.arrays() for P in self.layers]
        norm = self.norm.arrays()
        return torch.from_numpy(encoder(as_numpy(x), layers, norm["g"], norm["b"], self.n_heads, as_numpy(keep)))


class NumpyPatchEmbed(nn.Module):
    def __init__(self, D, C, p):
        super().__init__()
        self.P = Holder({"w": (C * p * p, D), "b": (D,)})
        self.p, self.C = p, C

    def forward(self, images):
        P = self.P.arrays()
        return torch.from_numpy(patch_embed(as_numpy(images), P["w"], P["b"], self.p, self.C))


class NumpyViT(nn.Module):
    def __init__(self, config):
        super().__init__()
        D, C, p = config.d_model, config.channels, config.patch_size
        n_patches = (config.image_size // p) ** 2
        self.embed = Holder({"patch_w": (C * p * p, D), "patch_b": (D,), "cls_token": (1, 1, D), "pos_embed": (1, n_patches + 1, D)})
        self.encoder = NumpyEncoder(D, config.d_ff, config.n_heads, config.n_layers)
        self.head = Holder({"w": (D, config.n_classes), "b": (config.n_classes,)})
        self.n_heads, self.p, self.image_size, self.C = config.n_heads, p, config.image_size, C

    def forward(self, images):
        V = dict(self.embed.arrays())
        V["layers"] = [P.arrays() for P in self.encoder.layers]
        V["norm_g"], V["norm_b"] = as_numpy(self.encoder.norm.g), as_numpy(self.encoder.norm.b)
        V["head_w"], V["head_b"] = as_numpy(self.head.w), as_numpy(self.head.b)
        return torch.from_numpy(vit(as_numpy(images), V, self.n_heads, self.p, self.image_size, self.C))


# ---- the adapter
from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions

T = (1, 0)  # numpy [in, out] -> canonical [out, in]


def layer_params(prefix: str, canonical: str) -> dict:
    names = {}
    for c in "qkvo":
        names[f"{canonical}self_attn.{c}.weight"] = Param(f"{prefix}w{c}", permute=T)
        names[f"{canonical}self_attn.{c}.bias"] = f"{prefix}b{c}"
    names |= {f"{canonical}norm1.weight": f"{prefix}ln1_g", f"{canonical}norm1.bias": f"{prefix}ln1_b"}
    names |= {f"{canonical}norm2.weight": f"{prefix}ln2_g", f"{canonical}norm2.bias": f"{prefix}ln2_b"}
    names |= {f"{canonical}ffn.fc1.weight": Param(f"{prefix}w1", permute=T), f"{canonical}ffn.fc1.bias": f"{prefix}b1"}
    names |= {f"{canonical}ffn.fc2.weight": Param(f"{prefix}w2", permute=T), f"{canonical}ffn.fc2.bias": f"{prefix}b2"}
    return names


def encoder_params(prefix: str, canonical: str, n_layers: int) -> dict:
    names = {}
    for i in range(n_layers):
        names |= layer_params(f"{prefix}layers.{i}.", f"{canonical}layers.{i}.")
    return names | {f"{canonical}norm.weight": f"{prefix}norm.g", f"{canonical}norm.bias": f"{prefix}norm.b"}


def vit_params(config) -> dict:
    names = encoder_params("encoder.", "encoder.", config.n_layers)
    names |= {"patch_embed.weight": Param("embed.patch_w", permute=T), "patch_embed.bias": "embed.patch_b"}
    names |= {"cls_token": "embed.cls_token", "pos_embed": "embed.pos_embed"}
    return names | {"head.weight": Param("head.w", permute=T), "head.bias": "head.b"}


def keep_of(x, key_padding=None, attn_mask=None, causal=None):
    L = x.shape[1]
    keep = torch.ones(1, L, L, dtype=torch.bool)
    if key_padding is not None:
        keep = keep & key_padding[:, None, :]
    if attn_mask is not None:
        keep = keep & (attn_mask if attn_mask.dim() == 3 else attn_mask[None])
    if causal is not None and bool(causal):
        keep = keep & torch.ones(L, L, dtype=torch.bool).tril()
    return keep


VIT = Conventions(norm_placement="pre", activation="gelu", eps=1e-6)
MASKED = Conventions(norm_placement="pre", activation="gelu", eps=1e-6, fully_masked_rows="nan")
F64 = dict(dtypes=("float64",), grad_dtypes=())

adapter = TorchModuleAdapter("numpy-vit", [
    TorchEntry(
        "patch_embed",
        make=lambda config: NumpyPatchEmbed(config.d_model, config.channels, config.patch_size),
        forward=lambda m, images: m(images),
        param_map=lambda config: {"weight": Param("P.w", permute=T), "bias": "P.b"},
        **F64,
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: NumpyEncoderLayer(config.d_model, config.d_ff, config.n_heads),
        forward=lambda m, x, key_padding=None, attn_mask=None, causal=None: m(x, keep_of(x, key_padding, attn_mask, causal)),
        param_map=layer_params("P.", ""),
        conventions=MASKED, supports=ConfigSpace(split_heads=True), **F64,
    ),
    TorchEntry(
        "encoder",
        make=lambda config: NumpyEncoder(config.d_model, config.d_ff, config.n_heads, config.n_layers),
        forward=lambda m, x, key_padding=None, attn_mask=None, causal=None: m(x, keep_of(x, key_padding, attn_mask, causal)),
        param_map=lambda config: encoder_params("", "", config.n_layers),
        conventions=MASKED, supports=ConfigSpace(split_heads=True), **F64,
    ),
    TorchEntry(
        "vit",
        make=lambda config: NumpyViT(config),
        forward=lambda m, images: m(images),
        param_map=vit_params,
        conventions=VIT, supports=ConfigSpace(split_heads=True), **F64,
    ),
])
