"""A ViT that adds the position table to the patch tokens *before* prepending the class
token, slicing ``pos_embed[:, :n]``: the class token gets no position embedding and every patch
gets its left neighbour's (patch i the entry of i - 1, where the paper gives it entry i + 1).

Bug source: lucidrains/vit-pytorch issue #90 and pull request #274 (the order of the class token,
the position table and the final norm in ``forward``); google-research/vision_transformer issue
#93 (patch tokens, class token and ``pos_embedding`` assembled by hand in ports of the model).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x):
        B, N, D = x.shape
        q, k, v = (
            f(x).view(B, N, self.heads, -1).transpose(1, 2) for f in (self.q, self.k, self.v)
        )
        out = F.scaled_dot_product_attention(q, k, v)
        return self.o(out.transpose(1, 2).reshape(B, N, D))


class Layer(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_dim: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.self_attn = Attention(dim, heads)
        self.ffn = nn.ModuleDict({"fc1": nn.Linear(dim, mlp_dim), "fc2": nn.Linear(mlp_dim, dim)})

    def forward(self, x):
        x = x + self.self_attn(self.norm1(x))
        return x + self.ffn["fc2"](F.gelu(self.ffn["fc1"](self.norm2(x))))


class Encoder(nn.Module):
    def __init__(self, dim: int, depth: int, heads: int, mlp_dim: int):
        super().__init__()
        self.layers = nn.ModuleList([Layer(dim, heads, mlp_dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class ViT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.img_size = c.image_size
        n = (c.image_size // c.patch_size) ** 2
        self.patch_embed = nn.Conv2d(c.channels, c.d_model, c.patch_size, stride=c.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c.d_model))
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, c.d_model) * 0.02)
        self.encoder = Encoder(c.d_model, c.n_layers, c.n_heads, c.d_ff)
        self.head = nn.Linear(c.d_model, c.n_classes)

    def forward(self, img):
        H, W = img.shape[-2:]
        # as timm's PatchEmbed with strict_img_size: the model is built for one size
        assert H == W == self.img_size, f"Input size ({H}*{W}) doesn't match model"
        x = self.patch_embed(img).flatten(2).transpose(1, 2)  # [B, n, D]
        b, n, _ = x.shape
        x = x + self.pos_embed[:, :n]  # the bug: added before the class token, sliced to n
        x = torch.cat([self.cls_token.expand(b, -1, -1), x], dim=1)
        return self.head(self.encoder(x)[:, 0])


ONLY = ("vit",)
LABEL = "vit.cls_pos_embed_missing"

adapter = TorchModuleAdapter(
    "heldout.vit_pos_embed_before_cls",
    [
        TorchEntry(
            "vit",
            make=ViT,
            forward=lambda m, images: m(images),  # canonical names: no parameter map
        )
    ],
)
