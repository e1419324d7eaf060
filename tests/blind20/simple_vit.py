# fmt: off
# ruff: noqa
"""lucidrains' SimpleViT (vit_pytorch/simple_vit.py), written for the twentieth blind benchmark:
patchify by Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2 c)') as a reshape/permute, the fixed
2-D sin-cos table posemb_sincos_2d, Attention with one to_qkv linear and chunk(3), pre-LN, a GELU
FeedForward, a final norm, mean pooling and a linear head."""
import torch
import torch.nn.functional as F
from torch import nn


def pair(t):
    return t if isinstance(t, tuple) else (t, t)


def posemb_sincos_2d(h, w, dim, temperature: int = 10000, dtype=torch.float32):
    y, x = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    assert (dim % 4) == 0, "feature dimension must be multiple of 4 for sincos emb"
    omega = torch.arange(dim // 4, dtype=torch.float64) / (dim // 4 - 1)
    omega = 1.0 / (temperature ** omega)
    y = y.flatten()[:, None] * omega[None, :]
    x = x.flatten()[:, None] * omega[None, :]
    pe = torch.cat((x.sin(), x.cos(), y.sin(), y.cos()), dim=1)
    return pe.type(dtype)


def rearrange_patches(img, p1, p2):
    # Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2 c)')
    b, c, H, W = img.shape
    x = img.reshape(b, c, H // p1, p1, W // p2, p2)
    x = x.permute(0, 2, 4, 3, 5, 1)
    return x.reshape(b, (H // p1) * (W // p2), p1 * p2 * c)


class PatchLinear(nn.Module):
    """nn.Linear(patch_dim, dim) whose weight is kept as [dim, p1, p2, c]: the (p1 p2 c) order."""

    def __init__(self, p1, p2, c, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, p1, p2, c))
        self.bias = nn.Parameter(torch.zeros(dim))
        nn.init.normal_(self.weight, std=(p1 * p2 * c) ** -0.5)

    def forward(self, x):
        return F.linear(x, self.weight.flatten(1), self.bias)


class ToPatchEmbedding(nn.Module):
    def __init__(self, patch_height, patch_width, channels, dim):
        super().__init__()
        self.p1, self.p2 = patch_height, patch_width
        self.norm_in = nn.Identity()  # SimpleViT: nn.LayerNorm(patch_dim); the spec has no such norm
        self.linear = PatchLinear(patch_height, patch_width, channels, dim)
        self.norm_out = nn.Identity()  # SimpleViT: nn.LayerNorm(dim); the spec has no such norm

    def forward(self, img):
        x = rearrange_patches(img, self.p1, self.p2)
        x = self.norm_in(x)
        x = self.linear(x)
        return self.norm_out(x)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(dim),
            nn.Linear(dim, hidden_dim),
            nn.GELU(),
            nn.Linear(hidden_dim, dim),
        )

    def forward(self, x):
        return self.net(x)


class Attention(nn.Module):
    def __init__(self, dim, heads=8, dim_head=64):
        super().__init__()
        inner_dim = dim_head * heads
        self.heads = heads
        self.scale = dim_head**-0.5
        self.norm = nn.LayerNorm(dim)
        self.attend = nn.Softmax(dim=-1)
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=False)
        self.to_out = nn.Linear(inner_dim, dim, bias=False)

    def forward(self, x, mask=None):
        x = self.norm(x)
        qkv = self.to_qkv(x).chunk(3, dim=-1)
        # rearrange(t, 'b n (h d) -> b h n d', h = self.heads)
        q, k, v = map(lambda t: t.reshape(t.shape[0], t.shape[1], self.heads, -1).permute(0, 2, 1, 3), qkv)
        dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        if mask is not None:
            dots = dots.masked_fill(~mask, float("-inf"))
        attn = self.attend(dots)
        out = torch.matmul(attn, v)
        # rearrange(out, 'b h n d -> b n (h d)')
        out = out.permute(0, 2, 1, 3).reshape(out.shape[0], out.shape[2], -1)
        return self.to_out(out)


class TransformerLayer(nn.ModuleList):
    def __init__(self, dim, heads, dim_head, mlp_dim):
        super().__init__([Attention(dim, heads=heads, dim_head=dim_head), FeedForward(dim, mlp_dim)])

    def forward(self, x, mask=None):
        attn, ff = self
        x = attn(x, mask=mask) + x
        x = ff(x) + x
        return x


class Transformer(nn.Module):
    def __init__(self, dim, depth, heads, dim_head, mlp_dim, final_norm=True):
        super().__init__()
        self.norm = nn.LayerNorm(dim) if final_norm else nn.Identity()
        self.layers = nn.ModuleList([TransformerLayer(dim, heads, dim_head, mlp_dim) for _ in range(depth)])

    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask=mask)
        return self.norm(x)


class SimpleViT(nn.Module):
    def __init__(self, *, image_size, patch_size, num_classes, dim, depth, heads, mlp_dim, channels=3, dim_head=64):
        super().__init__()
        image_height, image_width = pair(image_size)
        patch_height, patch_width = pair(patch_size)
        assert image_height % patch_height == 0 and image_width % patch_width == 0, "Image dimensions must be divisible by the patch size."
        self.image_size = (image_height, image_width)
        self.to_patch_embedding = ToPatchEmbedding(patch_height, patch_width, channels, dim)
        # the spec's ViT always prepends a class token (mean pooling leaves it out): a slot
        # for it, with a zero row of the position table in front of posemb_sincos_2d's rows
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        table = posemb_sincos_2d(h=image_height // patch_height, w=image_width // patch_width, dim=dim, dtype=torch.float64)
        self.pos_embedding = nn.Parameter(torch.cat([torch.zeros(1, dim, dtype=torch.float64), table]).unsqueeze(0).float())
        self.transformer = Transformer(dim, depth, heads, dim_head, mlp_dim)
        self.pool = "mean"
        self.to_latent = nn.Identity()
        self.linear_head = nn.Linear(dim, num_classes)

    def forward(self, img):
        if tuple(img.shape[-2:]) != self.image_size:
            raise ValueError(f"image size {tuple(img.shape[-2:])} is not {self.image_size}")
        x = self.to_patch_embedding(img)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.pos_embedding.to(x.dtype)
        x = self.transformer(x)
        x = x[:, 1:].mean(dim=1)
        x = self.to_latent(x)
        return self.linear_head(x)


# ---- the adapter
from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions

WB = ("weight", "bias")
NO_ATTN_BIAS = ConfigSpace(split_heads=True, biases={"attention": False})


def layer_map(config, prefix="", ours=""):
    d = config.d_model
    out = {f"{prefix}self_attn.{n}.weight": Param(f"{ours}0.to_qkv.weight", slice=(0, i * d, (i + 1) * d)) for i, n in enumerate("qkv")}
    out[f"{prefix}self_attn.o.weight"] = f"{ours}0.to_out.weight"
    names = {"norm1": "0.norm", "norm2": "1.net.0", "ffn.fc1": "1.net.1", "ffn.fc2": "1.net.3"}
    return out | {f"{prefix}{c}.{p}": f"{ours}{o}.{p}" for c, o in names.items() for p in WB}


def encoder_map(config, prefix="", ours=""):
    out = {}
    for i in range(config.n_layers):
        out |= layer_map(config, f"{prefix}layers.{i}.", f"{ours}layers.{i}.")
    return out


PATCH = {"weight": Param("linear.weight", permute=(0, 3, 1, 2)), "bias": "linear.bias"}


def vit_map(config):
    out = {"patch_embed.weight": Param("to_patch_embedding.linear.weight", permute=(0, 3, 1, 2)), "patch_embed.bias": "to_patch_embedding.linear.bias"}
    out |= {"cls_token": "cls_token", "pos_embed": "pos_embedding"}
    out |= encoder_map(config, "encoder.", "transformer.")
    out |= {"encoder.norm.weight": "transformer.norm.weight", "encoder.norm.bias": "transformer.norm.bias"}
    return out | {"head.weight": "linear_head.weight", "head.bias": "linear_head.bias"}


def keep_mask(x, key_padding=None, causal=None):
    n = x.shape[1]
    mask = None
    if key_padding is not None:
        mask = key_padding[:, None, None, :]
    if causal is not None and bool(causal):
        tri = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        mask = tri if mask is None else mask & tri
    return mask


def layer_forward(module, x, key_padding=None, causal=None):
    return module(x, mask=keep_mask(x, key_padding, causal))


def encoder_forward(module, x, key_padding=None, causal=None):
    return module(x, mask=keep_mask(x, key_padding, causal))


def make_vit(config):
    return SimpleViT(image_size=config.image_size, patch_size=config.patch_size, num_classes=config.n_classes, dim=config.d_model,
                     depth=config.n_layers, heads=config.n_heads, mlp_dim=config.d_ff, channels=config.channels, dim_head=config.d_model // config.n_heads)


VIT = Conventions(norm_placement="pre", activation="gelu", pooling="mean")
VIT_NAN = Conventions(norm_placement="pre", activation="gelu", fully_masked_rows="nan")

adapter = TorchModuleAdapter("blind20-simple-vit", [
    TorchEntry("patch_embed", make=lambda config: ToPatchEmbedding(config.patch_size, config.patch_size, config.channels, config.d_model), forward=lambda m, images: m(images), param_map=PATCH),
    TorchEntry(
        "encoder_layer",
        make=lambda config: TransformerLayer(config.d_model, config.n_heads, config.d_model // config.n_heads, config.d_ff),
        forward=layer_forward,
        param_map=layer_map,
        conventions=VIT_NAN,
        supports=NO_ATTN_BIAS,
    ),
    TorchEntry(
        "encoder",
        make=lambda config: Transformer(config.d_model, config.n_layers, config.n_heads, config.d_model // config.n_heads, config.d_ff),
        forward=encoder_forward,
        param_map=lambda config: encoder_map(config) | {f"norm.{p}": f"norm.{p}" for p in WB},
        conventions=VIT_NAN,
        supports=NO_ATTN_BIAS,
    ),
    TorchEntry("vit", make=make_vit, forward=lambda m, images: m(images), param_map=vit_map, conventions=VIT, supports=NO_ATTN_BIAS),
])
