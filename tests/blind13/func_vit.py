# fmt: off
# ruff: noqa
"""A ViT written functionally with torch.func: the parameters are one flat dict of tensors
(timm's names: "blocks.0.attn.qkv.weight", ...), every sublayer a pure function of
(params, prefix, one example) with no batch axis, batched with torch.func.vmap. Written for
the thirteenth blind benchmark of transformer-tck."""

import dataclasses
import functools
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import vmap

from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import VIT_CANONICAL


@dataclasses.dataclass(frozen=True)
class ViTSpec:
    img_size: int = 224
    patch_size: int = 16
    in_chans: int = 3
    num_classes: int = 1000
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_hidden: int = 3072
    eps: float = 1e-6


# ---- the parameters: one flat dict ----

def init_block(spec, prefix, gen):
    D, Hd = spec.embed_dim, spec.mlp_hidden
    n = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64) * 0.02
    return {
        prefix + "norm1.weight": torch.ones(D, dtype=torch.float64),
        prefix + "norm1.bias": torch.zeros(D, dtype=torch.float64),
        prefix + "attn.qkv.weight": n(3 * D, D),
        prefix + "attn.qkv.bias": torch.zeros(3 * D, dtype=torch.float64),
        prefix + "attn.proj.weight": n(D, D),
        prefix + "attn.proj.bias": torch.zeros(D, dtype=torch.float64),
        prefix + "norm2.weight": torch.ones(D, dtype=torch.float64),
        prefix + "norm2.bias": torch.zeros(D, dtype=torch.float64),
        prefix + "mlp.fc1.weight": n(Hd, D),
        prefix + "mlp.fc1.bias": torch.zeros(Hd, dtype=torch.float64),
        prefix + "mlp.fc2.weight": n(D, Hd),
        prefix + "mlp.fc2.bias": torch.zeros(D, dtype=torch.float64),
    }


def init_encoder(spec, prefix, gen):
    params = {}
    for i in range(spec.depth):
        params |= init_block(spec, f"{prefix}blocks.{i}.", gen)
    params[prefix + "norm.weight"] = torch.ones(spec.embed_dim, dtype=torch.float64)
    params[prefix + "norm.bias"] = torch.zeros(spec.embed_dim, dtype=torch.float64)
    return params


def init_patch_embed(spec, prefix, gen):
    D, C, p = spec.embed_dim, spec.in_chans, spec.patch_size
    return {
        prefix + "proj.weight": torch.randn(D, C, p, p, generator=gen, dtype=torch.float64) / math.sqrt(C * p * p),
        prefix + "proj.bias": torch.zeros(D, dtype=torch.float64),
    }


def init_vit(spec, gen):
    num_patches = (spec.img_size // spec.patch_size) ** 2
    params = init_patch_embed(spec, "patch_embed.", gen)
    params["cls_token"] = torch.randn(1, 1, spec.embed_dim, generator=gen, dtype=torch.float64) * 1e-6
    params["pos_embed"] = torch.randn(1, num_patches + 1, spec.embed_dim, generator=gen, dtype=torch.float64) * 0.02
    params |= init_encoder(spec, "", gen)
    params["head.weight"] = torch.randn(spec.num_classes, spec.embed_dim, generator=gen, dtype=torch.float64) * 0.02
    params["head.bias"] = torch.zeros(spec.num_classes, dtype=torch.float64)
    return params


# ---- pure functions of ONE example (no batch axis) ----

def patchify(img, p):
    """[C, H, W] -> [N_p, C*p*p]: patches row-major over the grid, each flattened (c, y, x)."""
    C, H, W = img.shape
    x = img.reshape(C, H // p, p, W // p, p)
    x = x.permute(1, 3, 0, 2, 4)
    return x.reshape((H // p) * (W // p), C * p * p)


def patch_embed(params, prefix, img):
    w = params[prefix + "proj.weight"]
    b = params[prefix + "proj.bias"]
    D, C, p, _ = w.shape
    if img.shape[0] != C:
        raise ValueError(f"expected {C} channels, got {img.shape[0]}")
    if img.shape[1] % p or img.shape[2] % p:
        raise ValueError(f"image size {tuple(img.shape[1:])} is not a multiple of the patch size {p}")
    patches = patchify(img, p)
    return patches @ w.reshape(D, C * p * p).T + b


def layer_norm(params, prefix, x, eps):
    return F.layer_norm(x, x.shape[-1:], params[prefix + "weight"], params[prefix + "bias"], eps)


def linear(params, prefix, x):
    return F.linear(x, params[prefix + "weight"], params[prefix + "bias"])


def attention(params, prefix, x, keep, num_heads, causal=False):
    """x [N, D]; keep [N] (True = a real token) or None."""
    N, D = x.shape
    head_dim = D // num_heads
    qkv = linear(params, prefix + "qkv.", x)
    qkv = qkv.reshape(N, 3, num_heads, head_dim).permute(1, 2, 0, 3)
    q, k, v = qkv.unbind(0)
    scores = (q @ k.transpose(-2, -1)) * head_dim ** -0.5
    allowed = torch.ones(N, N, dtype=torch.bool, device=x.device)
    if causal:
        allowed = torch.tril(allowed)
    if keep is not None:
        allowed = allowed & keep[None, :]
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    attn = F.softmax(scores, dim=-1)
    out = attn @ v
    out = out.transpose(0, 1).reshape(N, D)
    return linear(params, prefix + "proj.", out)


def mlp(params, prefix, x):
    h = linear(params, prefix + "fc1.", x)
    h = F.gelu(h)
    return linear(params, prefix + "fc2.", h)


def block(params, prefix, x, keep, num_heads, eps, causal=False):
    x = x + attention(params, prefix + "attn.", layer_norm(params, prefix + "norm1.", x, eps), keep, num_heads, causal)
    x = x + mlp(params, prefix + "mlp.", layer_norm(params, prefix + "norm2.", x, eps))
    return x


def encoder(params, prefix, x, keep, num_heads, depth, eps, causal=False):
    for i in range(depth):
        x = block(params, f"{prefix}blocks.{i}.", x, keep, num_heads, eps, causal)
    return layer_norm(params, prefix + "norm.", x, eps)


def vit(params, img, num_heads, depth, eps):
    x = patch_embed(params, "patch_embed.", img)
    cls = params["cls_token"][0]
    x = torch.cat([cls, x], dim=0)
    x = x + params["pos_embed"][0]
    x = F.dropout(x, p=0.1, training=False)
    x = encoder(params, "", x, None, num_heads, depth, eps)
    pooled = x[0]
    return linear(params, "head.", pooled)


# ---- a module that holds the flat dict, and the batched calls ----

class FlatParams(nn.Module):
    """Holds a flat dict of tensors under their dotted names (nested empty modules), so that
    dict(self.named_parameters()) is the flat dict again."""

    def __init__(self, flat):
        super().__init__()
        for name, tensor in flat.items():
            *path, leaf = name.split(".")
            owner = self
            for part in path:
                if not hasattr(owner, part):
                    owner.add_module(part, nn.Module())
                owner = getattr(owner, part)
            owner.register_parameter(leaf, nn.Parameter(tensor))

    def flat(self):
        return dict(self.named_parameters())


class FuncViT(nn.Module):
    def __init__(self, spec, part):
        super().__init__()
        self.spec = spec
        self.part = part
        gen = torch.Generator().manual_seed(0)
        init = {"patch_embed": lambda: init_patch_embed(spec, "", gen), "block": lambda: init_block(spec, "", gen), "encoder": lambda: init_encoder(spec, "", gen), "vit": lambda: init_vit(spec, gen)}[part]
        self.params = FlatParams(init())

    def forward(self, x, key_padding=None, causal=False):
        params = self.params.flat()
        s = self.spec
        if self.part == "patch_embed":
            if x.dim() != 4:
                raise ValueError(f"expected images [B, C, H, W], got shape {tuple(x.shape)}")
            return vmap(patch_embed, in_dims=(None, None, 0))(params, "", x)
        if self.part == "vit":
            if x.dim() != 4 or tuple(x.shape[1:]) != (s.in_chans, s.img_size, s.img_size):
                raise ValueError(f"expected images [B, {s.in_chans}, {s.img_size}, {s.img_size}], got shape {tuple(x.shape)}")
            return vmap(functools.partial(vit, num_heads=s.num_heads, depth=s.depth, eps=s.eps), in_dims=(None, 0), randomness="different")(params, x)
        if x.dim() != 3 or x.shape[-1] != s.embed_dim:
            raise ValueError(f"expected x [B, L, {s.embed_dim}], got shape {tuple(x.shape)}")
        keep_dim = None if key_padding is None else 0
        if self.part == "block":
            fn = functools.partial(block, num_heads=s.num_heads, eps=s.eps, causal=causal)
        else:
            fn = functools.partial(encoder, num_heads=s.num_heads, depth=s.depth, eps=s.eps, causal=causal)
        return vmap(fn, in_dims=(None, None, 0, keep_dim))(params, "", x, key_padding)


# ---- the adapter ----

def _spec(config):
    return ViTSpec(
        img_size=config.image_size,
        patch_size=config.patch_size,
        in_chans=config.channels,
        num_classes=config.n_classes,
        embed_dim=config.d_model,
        depth=config.n_layers,
        num_heads=config.n_heads,
        mlp_hidden=config.d_ff,
    )


def _block_map(config, canon="", mine="params."):
    D = config.d_model
    out = {}
    for p in ("weight", "bias"):
        for i, n in enumerate("qkv"):
            out[f"{canon}self_attn.{n}.{p}"] = Param(f"{mine}attn.qkv.{p}", slice=(0, i * D, (i + 1) * D))
        out[f"{canon}self_attn.o.{p}"] = f"{mine}attn.proj.{p}"
        out[f"{canon}norm1.{p}"] = f"{mine}norm1.{p}"
        out[f"{canon}norm2.{p}"] = f"{mine}norm2.{p}"
        out[f"{canon}ffn.fc1.{p}"] = f"{mine}mlp.fc1.{p}"
        out[f"{canon}ffn.fc2.{p}"] = f"{mine}mlp.fc2.{p}"
    return out


def _encoder_map(config, canon="", mine="params."):
    out = {}
    for i in range(config.n_layers):
        out |= _block_map(config, f"{canon}layers.{i}.", f"{mine}blocks.{i}.")
    out |= {f"{canon}norm.{p}": f"{mine}norm.{p}" for p in ("weight", "bias")}
    return out


def _vit_map(config):
    out = {"patch_embed.weight": "params.patch_embed.proj.weight", "patch_embed.bias": "params.patch_embed.proj.bias"}
    out |= {"cls_token": "params.cls_token", "pos_embed": "params.pos_embed"}
    out |= _encoder_map(config, "encoder.", "params.")
    out |= {"head.weight": "params.head.weight", "head.bias": "params.head.bias"}
    return out


CONVENTIONS = dataclasses.replace(VIT_CANONICAL, eps=1e-6)
MASKED = dataclasses.replace(CONVENTIONS, fully_masked_rows="uniform")
SPACE = ConfigSpace(split_heads=True)


def _masked_forward(model, x, key_padding=None, causal=None):
    return model(x, key_padding=None if key_padding is None else key_padding.bool(), causal=bool(causal) if causal is not None else False)


adapter = TorchModuleAdapter("func-vit", [
    TorchEntry(
        "patch_embed",
        make=lambda config: FuncViT(_spec(config), "patch_embed"),
        forward=lambda model, images: model(images),
        param_map={"weight": "params.proj.weight", "bias": "params.proj.bias"},
        conventions=CONVENTIONS,
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: FuncViT(_spec(config), "block"),
        forward=_masked_forward,
        param_map=_block_map,
        conventions=MASKED,
        supports=SPACE,
    ),
    TorchEntry(
        "encoder",
        make=lambda config: FuncViT(_spec(config), "encoder"),
        forward=_masked_forward,
        param_map=_encoder_map,
        conventions=MASKED,
        supports=SPACE,
    ),
    TorchEntry(
        "vit",
        make=lambda config: FuncViT(_spec(config), "vit"),
        forward=lambda model, images: model(images),
        param_map=_vit_map,
        conventions=CONVENTIONS,
        supports=SPACE,
    ),
])
