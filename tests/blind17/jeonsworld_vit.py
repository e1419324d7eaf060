# fmt: off
# ruff: noqa
"""The ViT of jeonsworld/ViT-pytorch (models/modeling.py): Embeddings with a Conv2d patch
embedding, cls_token and position_embeddings, Attention with transpose_for_scores and a softmax
over attention_scores / math.sqrt(self.attention_head_size), Mlp (fc1, GELU, fc2), Block with
attention_norm and ffn_norm (pre-LN), Encoder with encoder_norm, the head on x[:, 0]."""

import copy
import math

import numpy as np
import torch
import torch.nn as nn
from torch.nn import Conv2d, Dropout, LayerNorm, Linear, Softmax
from torch.nn.modules.utils import _pair


class ViTConfig:
    """A small ml_collections-like config (configs.get_b16_config's fields)."""

    def __init__(self, hidden_size=32, num_heads=4, mlp_dim=64, num_layers=2, patch_size=4, img_size=16, in_channels=3, num_classes=10):
        self.hidden_size = hidden_size
        self.patches = {"size": (patch_size, patch_size)}
        self.transformer = {"mlp_dim": mlp_dim, "num_heads": num_heads, "num_layers": num_layers,
                            "attention_dropout_rate": 0.0, "dropout_rate": 0.1}
        self.classifier = "token"
        self.img_size = img_size
        self.in_channels = in_channels
        self.num_classes = num_classes


def swish(x):
    return x * torch.sigmoid(x)


ACT2FN = {"gelu": torch.nn.functional.gelu, "relu": torch.nn.functional.relu, "swish": swish}


class Attention(nn.Module):
    def __init__(self, config, vis):
        super(Attention, self).__init__()
        self.vis = vis
        self.num_attention_heads = config.transformer["num_heads"]
        self.attention_head_size = int(config.hidden_size / self.num_attention_heads)
        self.all_head_size = self.num_attention_heads * self.attention_head_size

        self.query = Linear(config.hidden_size, self.all_head_size)
        self.key = Linear(config.hidden_size, self.all_head_size)
        self.value = Linear(config.hidden_size, self.all_head_size)

        self.out = Linear(config.hidden_size, config.hidden_size)
        self.attn_dropout = Dropout(config.transformer["attention_dropout_rate"])
        self.proj_dropout = Dropout(config.transformer["attention_dropout_rate"])

        self.softmax = Softmax(dim=-1)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(*new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, mask=None):
        mixed_query_layer = self.query(hidden_states)
        mixed_key_layer = self.key(hidden_states)
        mixed_value_layer = self.value(hidden_states)

        query_layer = self.transpose_for_scores(mixed_query_layer)
        key_layer = self.transpose_for_scores(mixed_key_layer)
        value_layer = self.transpose_for_scores(mixed_value_layer)

        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if mask is not None:  # [B, 1, Lq, Lk] keep-mask (not in the original: the kit's checks)
            attention_scores = attention_scores.masked_fill(~mask, float("-inf"))
        attention_probs = self.softmax(attention_scores)
        weights = attention_probs if self.vis else None
        attention_probs = self.attn_dropout(attention_probs)

        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        context_layer = context_layer.view(*new_context_layer_shape)
        attention_output = self.out(context_layer)
        attention_output = self.proj_dropout(attention_output)
        return attention_output, weights


class Mlp(nn.Module):
    def __init__(self, config):
        super(Mlp, self).__init__()
        self.fc1 = Linear(config.hidden_size, config.transformer["mlp_dim"])
        self.fc2 = Linear(config.transformer["mlp_dim"], config.hidden_size)
        self.act_fn = ACT2FN["gelu"]
        self.dropout = Dropout(config.transformer["dropout_rate"])

        self._init_weights()

    def _init_weights(self):
        nn.init.xavier_uniform_(self.fc1.weight)
        nn.init.xavier_uniform_(self.fc2.weight)
        nn.init.normal_(self.fc1.bias, std=1e-6)
        nn.init.normal_(self.fc2.bias, std=1e-6)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act_fn(x)
        x = self.dropout(x)
        x = self.fc2(x)
        x = self.dropout(x)
        return x


class Embeddings(nn.Module):
    """Construct the embeddings from patch, position embeddings."""

    def __init__(self, config, img_size, in_channels=3):
        super(Embeddings, self).__init__()
        img_size = _pair(img_size)
        patch_size = _pair(config.patches["size"])
        n_patches = (img_size[0] // patch_size[0]) * (img_size[1] // patch_size[1])

        self.patch_embeddings = Conv2d(in_channels=in_channels,
                                       out_channels=config.hidden_size,
                                       kernel_size=patch_size,
                                       stride=patch_size)
        self.position_embeddings = nn.Parameter(torch.zeros(1, n_patches+1, config.hidden_size))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))

        self.dropout = Dropout(config.transformer["dropout_rate"])

        self.patch_size = patch_size

    def patch_tokens(self, x):
        """[B, C, H, W] -> [B, n_patches, hidden] (forward's first lines, named for the kit)"""
        if x.dim() != 4 or x.shape[-2] % self.patch_size[0] or x.shape[-1] % self.patch_size[1]:
            raise ValueError(f"image {tuple(x.shape)} is not cut into {self.patch_size} patches")
        x = self.patch_embeddings(x)
        x = x.flatten(2)
        x = x.transpose(-1, -2)
        return x

    def forward(self, x):
        B = x.shape[0]
        cls_tokens = self.cls_token.expand(B, -1, -1)

        x = self.patch_tokens(x)
        x = torch.cat((cls_tokens, x), dim=1)

        embeddings = x + self.position_embeddings
        embeddings = self.dropout(embeddings)
        return embeddings


class Block(nn.Module):
    def __init__(self, config, vis):
        super(Block, self).__init__()
        self.hidden_size = config.hidden_size
        self.attention_norm = LayerNorm(config.hidden_size, eps=1e-6)
        self.ffn_norm = LayerNorm(config.hidden_size, eps=1e-6)
        self.ffn = Mlp(config)
        self.attn = Attention(config, vis)

    def forward(self, x, mask=None):
        h = x
        x = self.attention_norm(x)
        x, weights = self.attn(x, mask)
        x = x + h

        h = x
        x = self.ffn_norm(x)
        x = self.ffn(x)
        x = x + h
        return x, weights


class Encoder(nn.Module):
    def __init__(self, config, vis):
        super(Encoder, self).__init__()
        self.vis = vis
        self.layer = nn.ModuleList()
        self.encoder_norm = LayerNorm(config.hidden_size, eps=1e-6)
        for _ in range(config.transformer["num_layers"]):
            layer = Block(config, vis)
            self.layer.append(copy.deepcopy(layer))

    def forward(self, hidden_states, mask=None):
        attn_weights = []
        for layer_block in self.layer:
            hidden_states, weights = layer_block(hidden_states, mask)
            if self.vis:
                attn_weights.append(weights)
        encoded = self.encoder_norm(hidden_states)
        return encoded, attn_weights


class Transformer(nn.Module):
    def __init__(self, config, img_size, vis):
        super(Transformer, self).__init__()
        self.embeddings = Embeddings(config, img_size=img_size, in_channels=config.in_channels)
        self.encoder = Encoder(config, vis)

    def forward(self, input_ids):
        embedding_output = self.embeddings(input_ids)
        encoded, attn_weights = self.encoder(embedding_output)
        return encoded, attn_weights


class VisionTransformer(nn.Module):
    def __init__(self, config, img_size=224, num_classes=21843, zero_head=False, vis=False):
        super(VisionTransformer, self).__init__()
        self.num_classes = num_classes
        self.zero_head = zero_head
        self.classifier = config.classifier

        self.transformer = Transformer(config, img_size, vis)
        self.head = Linear(config.hidden_size, num_classes)

    def forward(self, x, labels=None):
        x, attn_weights = self.transformer(x)
        logits = self.head(x[:, 0])
        return logits, attn_weights


# ---- the adapter
from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def vit_config(config):
    return ViTConfig(hidden_size=config.d_model, num_heads=config.n_heads, mlp_dim=config.d_ff,
                     num_layers=config.n_layers, patch_size=config.patch_size, img_size=config.image_size,
                     in_channels=config.channels, num_classes=config.n_classes)


def keep_mask(x, key_padding=None, causal=None):
    B, L = x.shape[:2]
    mask = None
    if key_padding is not None:
        mask = torch.as_tensor(key_padding).bool()[:, None, None, :].expand(B, 1, L, L)
    if causal is not None and bool(causal):
        tril = torch.ones(L, L, dtype=torch.bool).tril()[None, None]
        mask = tril if mask is None else mask & tril
    return mask


def patch_embed_only(config):
    """Embeddings without the class token and the position table (the patch_embed subject)."""
    embeddings = Embeddings(vit_config(config), config.image_size, config.channels)
    del embeddings.cls_token, embeddings.position_embeddings
    return embeddings


def layer_forward(module, x, key_padding=None, causal=None):
    out, _ = module(x, keep_mask(x, key_padding, causal))
    return out


def block_map(prefix="", theirs=""):
    names = {"self_attn.q": "attn.query", "self_attn.k": "attn.key", "self_attn.v": "attn.value", "self_attn.o": "attn.out",
             "norm1": "attention_norm", "norm2": "ffn_norm", "ffn.fc1": "ffn.fc1", "ffn.fc2": "ffn.fc2"}
    return {f"{prefix}{c}.{p}": f"{theirs}{t}.{p}" for c, t in names.items() for p in ("weight", "bias")}


def encoder_map(config, prefix="", theirs=""):
    m = {}
    for i in range(config.n_layers):
        m |= block_map(f"{prefix}layers.{i}.", f"{theirs}layer.{i}.")
    return m | {f"{prefix}norm.{p}": f"{theirs}encoder_norm.{p}" for p in ("weight", "bias")}


def vit_map(config):
    m = {"patch_embed.weight": "transformer.embeddings.patch_embeddings.weight",
         "patch_embed.bias": "transformer.embeddings.patch_embeddings.bias",
         "cls_token": "transformer.embeddings.cls_token",
         "pos_embed": "transformer.embeddings.position_embeddings",
         "head.weight": "head.weight", "head.bias": "head.bias"}
    return m | encoder_map(config, "encoder.", "transformer.encoder.")


VIT = Conventions(norm_placement="pre", activation="gelu", eps=1e-6)
MASKED = Conventions(norm_placement="pre", activation="gelu", eps=1e-6, fully_masked_rows="nan")
SPACE = ConfigSpace(split_heads=True)

adapter = TorchModuleAdapter("jeonsworld-vit", [
    TorchEntry(
        "patch_embed",
        make=patch_embed_only,
        forward=lambda module, images: module.patch_tokens(torch.as_tensor(images)),
        param_map={"weight": "patch_embeddings.weight", "bias": "patch_embeddings.bias"},
        conventions=Conventions(),
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: Block(vit_config(config), vis=False),
        forward=layer_forward,
        param_map=block_map(),
        conventions=MASKED,
        supports=SPACE,
    ),
    TorchEntry(
        "encoder",
        make=lambda config: Encoder(vit_config(config), vis=False),
        forward=layer_forward,
        param_map=encoder_map,
        conventions=MASKED,
        supports=SPACE,
    ),
    TorchEntry(
        "vit",
        make=lambda config: VisionTransformer(vit_config(config), img_size=config.image_size, num_classes=config.n_classes),
        forward=lambda module, images: module(torch.as_tensor(images))[0],
        param_map=vit_map,
        conventions=VIT,
        supports=SPACE,
    ),
])
