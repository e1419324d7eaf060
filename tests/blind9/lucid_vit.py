# fmt: off
# ruff: noqa
"""A ViT as lucidrains/vit-pytorch writes it (vit_pytorch/vit.py): `to_patch_embedding` as
a `Rearrange` then an `nn.Linear` (einops is not installed here, so the two `rearrange`
patterns are written by hand with reshape and permute), a random `cls_token` repeated over
the batch and concatenated in front, `pos_embedding` sliced to `n + 1` and added with `+=`,
an embedding dropout, a `Transformer` of `[Attention, FeedForward]` pairs in an
`nn.ModuleList`, each sublayer opening with its own `nn.LayerNorm` (pre-LN) and added back
(`x = attn(x) + x`), `Attention` with one bias-free `to_qkv` chunked in three, `self.scale =
dim_head ** -0.5`, `self.attend = nn.Softmax(dim = -1)`, `to_out` a Linear and Dropout,
`FeedForward` an `nn.Sequential` (LayerNorm, Linear, GELU, Dropout, Linear, Dropout), the
transformer's final `norm`, `pool = 'cls'`, `to_latent` an Identity and `mlp_head` a Linear.

Kept inside SPEC: the patch is flattened channel-major, `(c p1 p2)`, where vit-pytorch writes
`(p1 p2 c)` (the Linear's columns would not be the conv weight's layout; the flatten order only
fixes the weight layout, SPEC §9.1). The layer subject takes an optional key-padding mask and
a causal flag, applied as lucidrains' other repositories do (`masked_fill(~mask,
-finfo.max)`, `triu(j - i + 1)`), so the padding and causal checks run.
"""
import torch
from torch import nn

from tck.adapters import Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


# helpers

def pair(t):
    return t if isinstance(t, tuple) else (t, t)


def to_patches(img, p1, p2):
    # rearrange('b c (h p1) (w p2) -> b (h w) (c p1 p2)')
    b, c, H, W = img.shape
    h, w = H // p1, W // p2
    x = img.reshape(b, c, h, p1, w, p2)
    x = x.permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, h * w, c * p1 * p2)


def split_heads(t, h):
    # rearrange('b n (h d) -> b h n d')
    b, n, hd = t.shape
    return t.reshape(b, n, h, hd // h).transpose(1, 2)


def merge_heads(t):
    # rearrange('b h n d -> b n (h d)')
    b, h, n, d = t.shape
    return t.transpose(1, 2).reshape(b, n, h * d)


class Rearrange(nn.Module):
    def __init__(self, p1, p2):
        super().__init__()
        self.p1, self.p2 = p1, p2

    def forward(self, img):
        return to_patches(img, self.p1, self.p2)


# classes

class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim, dropout = 0.):
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(dim, eps = 1e-6),
            nn.Linear(dim, hidden_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, dim),
            nn.Dropout(dropout)
        )

    def forward(self, x):
        return self.net(x)


class Attention(nn.Module):
    def __init__(self, dim, heads = 8, dim_head = 64, dropout = 0.):
        super().__init__()
        inner_dim = dim_head *  heads
        project_out = not (heads == 1 and dim_head == dim)

        self.heads = heads
        self.scale = dim_head ** -0.5

        self.norm = nn.LayerNorm(dim, eps = 1e-6)

        self.attend = nn.Softmax(dim = -1)
        self.dropout = nn.Dropout(dropout)

        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias = False)

        self.to_out = nn.Sequential(
            nn.Linear(inner_dim, dim),
            nn.Dropout(dropout)
        ) if project_out else nn.Identity()

    def forward(self, x, mask = None, causal = False):
        x = self.norm(x)

        qkv = self.to_qkv(x).chunk(3, dim = -1)
        q, k, v = map(lambda t: split_heads(t, self.heads), qkv)

        dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        mask_value = -torch.finfo(dots.dtype).max

        if mask is not None:
            dots = dots.masked_fill(~mask[:, None, None, :], mask_value)

        if causal:
            i, j = dots.shape[-2:]
            causal_mask = torch.ones((i, j), device = x.device, dtype = torch.bool).triu(j - i + 1)
            dots = dots.masked_fill(causal_mask, mask_value)

        half = dots.dtype in (torch.float16, torch.bfloat16)
        attn = self.attend(dots.float() if half else dots).to(v.dtype)
        attn = self.dropout(attn)

        out = torch.matmul(attn, v)
        out = merge_heads(out)
        return self.to_out(out)


class Transformer(nn.Module):
    def __init__(self, dim, depth, heads, dim_head, mlp_dim, dropout = 0.):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps = 1e-6)
        self.layers = nn.ModuleList([])

        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                Attention(dim, heads = heads, dim_head = dim_head, dropout = dropout),
                FeedForward(dim, mlp_dim, dropout = dropout)
            ]))

    def forward(self, x, mask = None, causal = False):
        for attn, ff in self.layers:
            x = attn(x, mask = mask, causal = causal) + x
            x = ff(x) + x

        return self.norm(x)


class ViT(nn.Module):
    def __init__(self, *, image_size, patch_size, num_classes, dim, depth, heads, mlp_dim, pool = 'cls', channels = 3, dim_head = 64, dropout = 0., emb_dropout = 0.):
        super().__init__()
        image_height, image_width = pair(image_size)
        patch_height, patch_width = pair(patch_size)

        assert image_height % patch_height == 0 and image_width % patch_width == 0, 'Image dimensions must be divisible by the patch size.'

        num_patches = (image_height // patch_height) * (image_width // patch_width)
        patch_dim = channels * patch_height * patch_width
        assert pool in {'cls', 'mean'}, 'pool type must be either cls (cls token) or mean (mean pooling)'
        self.image_size = (image_height, image_width)
        self.channels = channels

        self.to_patch_embedding = nn.Sequential(
            Rearrange(patch_height, patch_width),
            nn.Linear(patch_dim, dim),
        )

        self.pos_embedding = nn.Parameter(torch.randn(1, num_patches + 1, dim))
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.dropout = nn.Dropout(emb_dropout)

        self.transformer = Transformer(dim, depth, heads, dim_head, mlp_dim, dropout)

        self.pool = pool
        self.to_latent = nn.Identity()

        self.mlp_head = nn.Linear(dim, num_classes)

    def forward(self, img):
        if img.dim() != 4 or tuple(img.shape[-2:]) != self.image_size or img.shape[1] != self.channels:
            raise ValueError(f"expected images [B, {self.channels}, {self.image_size[0]}, {self.image_size[1]}], got {list(img.shape)}")
        x = self.to_patch_embedding(img)
        b, n, _ = x.shape

        cls_tokens = self.cls_token.expand(b, -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)
        x += self.pos_embedding[:, :(n + 1)]
        x = self.dropout(x)

        x = self.transformer(x)

        x = x.mean(dim = 1) if self.pool == 'mean' else x[:, 0]

        x = self.to_latent(x)
        return self.mlp_head(x)


# ---- the adapter -------------------------------------------------------------------------

class PatchEmbed(nn.Module):
    def __init__(self, config):
        super().__init__()
        p = config.patch_size
        self.p = p
        self.to_patch_embedding = nn.Sequential(
            Rearrange(p, p),
            nn.Linear(config.channels * p * p, config.d_model),
        )

    def forward(self, img):
        if img.dim() != 4 or img.shape[-1] % self.p or img.shape[-2] % self.p:
            raise ValueError(f"image {list(img.shape)} is not [B, C, H, W] with H, W divisible by {self.p}")
        return self.to_patch_embedding(img)


class Layer(Transformer):
    """One [Attention, FeedForward] pair of the Transformer, with its residual adds and no final norm."""

    def __init__(self, config):
        dh = config.d_model // config.n_heads
        super().__init__(config.d_model, 1, config.n_heads, dh, config.d_ff, dropout=0.1)
        self.norm = nn.Identity()


def make_vit(config):
    return ViT(
        image_size=config.image_size, patch_size=config.patch_size, num_classes=config.n_classes,
        dim=config.d_model, depth=config.n_layers, heads=config.n_heads, mlp_dim=config.d_ff,
        channels=config.channels, dim_head=config.d_model // config.n_heads, dropout=0.1, emb_dropout=0.1,
    )


def patch_map(config, own, canon):
    p, c, D = config.patch_size, config.channels, config.d_model
    return {
        f"{canon}weight": Param(f"{own}to_patch_embedding.1.weight", shape=(D, c, p, p)),
        f"{canon}bias": f"{own}to_patch_embedding.1.bias",
    }


def layer_map(config, own, canon):
    D = config.d_model
    out = {
        f"{canon}self_attn.q.weight": Param(f"{own}0.to_qkv.weight", slice=(0, 0, D)),
        f"{canon}self_attn.k.weight": Param(f"{own}0.to_qkv.weight", slice=(0, D, 2 * D)),
        f"{canon}self_attn.v.weight": Param(f"{own}0.to_qkv.weight", slice=(0, 2 * D, 3 * D)),
        f"{canon}self_attn.o.weight": f"{own}0.to_out.0.weight",
        f"{canon}self_attn.o.bias": f"{own}0.to_out.0.bias",
        f"{canon}norm1.weight": f"{own}0.norm.weight",
        f"{canon}norm1.bias": f"{own}0.norm.bias",
        f"{canon}norm2.weight": f"{own}1.net.0.weight",
        f"{canon}norm2.bias": f"{own}1.net.0.bias",
    }
    for i, j in (("fc1", 1), ("fc2", 4)):
        out |= {f"{canon}ffn.{i}.{p}": f"{own}1.net.{j}.{p}" for p in ("weight", "bias")}
    return out


def vit_map(config):
    out = patch_map(config, "", "patch_embed.")
    out |= {"cls_token": "cls_token", "pos_embed": "pos_embedding",
            "encoder.norm.weight": "transformer.norm.weight", "encoder.norm.bias": "transformer.norm.bias",
            "head.weight": "mlp_head.weight", "head.bias": "mlp_head.bias"}
    for i in range(config.n_layers):
        out |= layer_map(config, f"transformer.layers.{i}.", f"encoder.layers.{i}.")
    return out


def t(a):
    return None if a is None else torch.as_tensor(a)


VIT = dict(norm_placement="pre", activation="gelu", eps=1e-6)
QKV_NO_BIAS = {"attention_bias": False, "attention_out_bias": True}

adapter = TorchModuleAdapter("vit-pytorch", [
    TorchEntry(
        "patch_embed",
        make=PatchEmbed,
        forward=lambda m, images: m(images),
        param_map=lambda config: patch_map(config, "", ""),
    ),
    TorchEntry(
        "encoder_layer",
        make=Layer,
        forward=lambda m, x, key_padding=None, causal=None: m(x, mask=t(key_padding), causal=bool(causal)),
        param_map=lambda config: layer_map(config, "layers.0.", ""),
        conventions=Conventions(**VIT, fully_masked_rows="uniform"),
        config=QKV_NO_BIAS,
    ),
    TorchEntry(
        "vit",
        make=make_vit,
        forward=lambda m, images: m(images),
        param_map=vit_map,
        conventions=Conventions(**VIT),
        config=QKV_NO_BIAS,
    ),
])
