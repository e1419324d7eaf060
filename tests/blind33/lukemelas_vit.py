# fmt: off
# ruff: noqa
"""ViT as lukemelas' pytorch-pretrained-vit writes it (pytorch_pretrained_vit/transformer.py
and model.py): split_last / merge_last, MultiHeadedSelfAttention (proj_q, proj_k, proj_v, the
additive -10000 mask, the scores kept for visualisation), PositionWiseFeedForward (fc1, fc2,
F.gelu), Block (attn, proj, norm1, pwff, norm2, drop), Transformer (blocks),
PositionalEmbedding1D, and ViT (patch_embedding conv, class_token, positional_embedding,
transformer, the optional pre_logits, norm and fc), with its init_weights."""
from typing import Optional

import numpy as np
import torch
from torch import nn
from torch import Tensor
from torch.nn import functional as F


# ---- pytorch_pretrained_vit/transformer.py

def split_last(x, shape):
    "split the last dimension to given shape"
    shape = list(shape)
    assert shape.count(-1) <= 1
    if -1 in shape:
        shape[shape.index(-1)] = int(x.size(-1) / -np.prod(shape))
    return x.view(*x.size()[:-1], *shape)


def merge_last(x, n_dims):
    "merge the last n_dims to a dimension"
    s = x.size()
    assert n_dims > 1 and n_dims < len(s)
    return x.view(*s[:-n_dims], -1)


class MultiHeadedSelfAttention(nn.Module):
    """Multi-Headed Dot Product Attention"""
    def __init__(self, dim, num_heads, dropout):
        super().__init__()
        self.proj_q = nn.Linear(dim, dim)
        self.proj_k = nn.Linear(dim, dim)
        self.proj_v = nn.Linear(dim, dim)
        self.drop = nn.Dropout(dropout)
        self.n_heads = num_heads
        self.scores = None # for visualization

    def forward(self, x, mask):
        """
        x, q(query), k(key), v(value) : (B(batch_size), S(seq_len), D(dim))
        mask : (B(batch_size) x S(seq_len))
        * split D(dim) into (H(n_heads), W(width of head)) ; D = H * W
        """
        # (B, S, D) -proj-> (B, S, D) -split-> (B, S, H, W) -trans-> (B, H, S, W)
        q, k, v = self.proj_q(x), self.proj_k(x), self.proj_v(x)
        q, k, v = (split_last(x, (self.n_heads, -1)).transpose(1, 2) for x in [q, k, v])
        # (B, H, S, W) @ (B, H, W, S) -> (B, H, S, S) -softmax-> (B, H, S, S)
        scores = q @ k.transpose(-2, -1) / np.sqrt(k.size(-1))
        if mask is not None:
            mask = mask[:, None, None, :].float()
            scores -= 10000.0 * (1.0 - mask)
        scores = self.drop(F.softmax(scores, dim=-1))
        # (B, H, S, S) @ (B, H, S, W) -> (B, H, S, W) -trans-> (B, S, H, W)
        h = (scores @ v).transpose(1, 2).contiguous()
        # -merge-> (B, S, D)
        h = merge_last(h, 2)
        self.scores = scores
        return h


class PositionWiseFeedForward(nn.Module):
    """FeedForward Neural Networks for each position"""
    def __init__(self, dim, ff_dim):
        super().__init__()
        self.fc1 = nn.Linear(dim, ff_dim)
        self.fc2 = nn.Linear(ff_dim, dim)

    def forward(self, x):
        # (B, S, D) -> (B, S, D_ff) -> (B, S, D)
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """Transformer Block"""
    def __init__(self, dim, num_heads, ff_dim, dropout):
        super().__init__()
        self.attn = MultiHeadedSelfAttention(dim, num_heads, dropout)
        self.proj = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.pwff = PositionWiseFeedForward(dim, ff_dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask):
        h = self.drop(self.proj(self.attn(self.norm1(x), mask)))
        x = x + h
        h = self.drop(self.pwff(self.norm2(x)))
        x = x + h
        return x


class Transformer(nn.Module):
    """Transformer with Self-Attentive Blocks"""
    def __init__(self, num_layers, dim, num_heads, ff_dim, dropout):
        super().__init__()
        self.blocks = nn.ModuleList([
            Block(dim, num_heads, ff_dim, dropout) for _ in range(num_layers)])

    def forward(self, x, mask=None):
        for block in self.blocks:
            x = block(x, mask)
        return x


# ---- pytorch_pretrained_vit/utils.py, model.py

def as_tuple(x):
    return x if isinstance(x, tuple) else (x, x)


class PositionalEmbedding1D(nn.Module):
    """Adds (optionally learned) positional embeddings to the inputs."""

    def __init__(self, seq_len, dim):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.zeros(1, seq_len, dim))

    def forward(self, x):
        """Input has shape `(batch_size, seq_len, emb_dim)`"""
        return x + self.pos_embedding


class ViT(nn.Module):
    """
    Args:
        name (str): Model name, e.g. 'B_16'
        pretrained (bool): Load pretrained weights
        in_channels (int): Number of channels in input data
        num_classes (int): Number of classes, default 1000

    References:
        [1] https://openreview.net/forum?id=YicbFdNTTy
    """

    def __init__(
        self,
        name: Optional[str] = None,
        pretrained: bool = False,
        patches: int = 16,
        dim: int = 768,
        ff_dim: int = 3072,
        num_heads: int = 12,
        num_layers: int = 12,
        attention_dropout_rate: float = 0.0,
        dropout_rate: float = 0.1,
        representation_size: Optional[int] = None,
        load_repr_layer: bool = False,
        classifier: str = 'token',
        positional_embedding: str = '1d',
        in_channels: int = 3,
        image_size: Optional[int] = None,
        num_classes: Optional[int] = None,
    ):
        super().__init__()

        # Configuration
        if name is None:
            check_msg = 'must specify name of pretrained model'
            assert not pretrained, check_msg
            if num_classes is None:
                num_classes = 1000
            if image_size is None:
                image_size = 384
        else:
            raise ValueError('no pretrained configs here: pass the sizes')
        self.image_size = image_size

        # Image and patch sizes
        h, w = as_tuple(image_size)  # image sizes
        fh, fw = as_tuple(patches)  # patch sizes
        gh, gw = h // fh, w // fw  # number of patches
        seq_len = gh * gw

        # Patch embedding
        self.patch_embedding = nn.Conv2d(in_channels, dim, kernel_size=(fh, fw), stride=(fh, fw))

        # Class token
        if classifier == 'token':
            self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
            seq_len += 1

        # Positional embedding
        if positional_embedding.lower() == '1d':
            self.positional_embedding = PositionalEmbedding1D(seq_len, dim)
        else:
            raise NotImplementedError()

        # Transformer
        self.transformer = Transformer(num_layers=num_layers, dim=dim, num_heads=num_heads,
                                       ff_dim=ff_dim, dropout=dropout_rate)

        # Representation layer
        if representation_size and load_repr_layer:
            self.pre_logits = nn.Linear(dim, representation_size)
            pre_logits_size = representation_size
        else:
            pre_logits_size = dim

        # Classifier head
        self.norm = nn.LayerNorm(pre_logits_size, eps=1e-6)
        self.fc = nn.Linear(pre_logits_size, num_classes)

        # Initialize weights
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        def _init(m):
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)  # _trunc_normal(m.weight, std=0.02)  # from .initialization import _trunc_normal
                if hasattr(m, 'bias') and m.bias is not None:
                    nn.init.normal_(m.bias, std=1e-6)  # nn.init.constant(m.bias, 0)
        self.apply(_init)
        nn.init.constant_(self.fc.weight, 0)
        nn.init.constant_(self.fc.bias, 0)
        nn.init.normal_(self.positional_embedding.pos_embedding, std=0.02)  # _trunc_normal(self.positional_embedding.pos_embedding, std=0.02)
        nn.init.constant_(self.class_token, 0)

    def forward(self, x):
        """Breaks image into patches, applies transformer, applies MLP head.

        Args:
            x (tensor): `b,c,fh,fw`
        """
        b, c, fh, fw = x.shape
        assert (fh, fw) == as_tuple(self.image_size), f'input image size ({fh}*{fw}) does not match the model ({self.image_size})'
        x = self.patch_embedding(x)  # b,d,gh,gw
        x = x.flatten(2).transpose(1, 2)  # b,gh*gw,d
        if hasattr(self, 'class_token'):
            x = torch.cat((self.class_token.expand(b, -1, -1), x), dim=1)  # b,gh*gw+1,d
        if hasattr(self, 'positional_embedding'):
            x = self.positional_embedding(x)  # b,gh*gw+1,d
        x = self.transformer(x)  # b,gh*gw+1,d
        if hasattr(self, 'pre_logits'):
            x = self.pre_logits(x)
            x = torch.tanh(x)
        if hasattr(self, 'fc'):
            x = self.norm(x)[:, 0]  # b,d
            x = self.fc(x)  # b,num_classes
        return x


# ---- the adapter (glue, not pytorch-pretrained-vit): the subjects, canonical names

from tck.adapters import Param, TorchEntry, TorchModuleAdapter
from tck.adapters.config_space import ConfigSpace
from tck.reference import Conventions


def make_vit(config) -> ViT:
    return ViT(patches=config.patch_size, dim=config.d_model, ff_dim=config.d_ff, num_heads=config.n_heads,
               num_layers=config.n_layers, dropout_rate=0.1, classifier='token', positional_embedding='1d',
               in_channels=config.channels, image_size=config.image_size, num_classes=config.n_classes)


class PatchEmbedding(nn.Module):
    """ViT.forward's first two lines as a module (glue: the patch_embed subject)."""

    def __init__(self, config):
        super().__init__()
        self.image_size = config.image_size
        self.patch_embedding = nn.Conv2d(config.channels, config.d_model, kernel_size=as_tuple(config.patch_size), stride=as_tuple(config.patch_size))

    def forward(self, x):
        b, c, fh, fw = x.shape
        assert (fh, fw) == as_tuple(self.image_size), f'input image size ({fh}*{fw}) does not match the model ({self.image_size})'
        x = self.patch_embedding(x)  # b,d,gh,gw
        return x.flatten(2).transpose(1, 2)  # b,gh*gw,d


class TransformerAndNorm(nn.Module):
    """The encoder subject (glue): ViT.transformer and ViT.norm, the pre-LN stack's final norm."""

    def __init__(self, config):
        super().__init__()
        self.transformer = Transformer(num_layers=config.n_layers, dim=config.d_model, num_heads=config.n_heads, ff_dim=config.d_ff, dropout=0.1)
        self.norm = nn.LayerNorm(config.d_model, eps=1e-6)

    def forward(self, x, mask=None):
        return self.norm(self.transformer(x, mask))


def _block_map(prefix: str = '') -> dict:
    names = {
        'self_attn.q': 'attn.proj_q', 'self_attn.k': 'attn.proj_k', 'self_attn.v': 'attn.proj_v',
        'self_attn.o': 'proj', 'norm1': 'norm1', 'ffn.fc1': 'pwff.fc1', 'ffn.fc2': 'pwff.fc2', 'norm2': 'norm2',
    }
    return {f'{k}.{p}': f'{prefix}{v}.{p}' for k, v in names.items() for p in ('weight', 'bias')}


def _encoder_map(config, prefix: str = '') -> dict:
    out = {f'norm.{p}': f'{prefix}norm.{p}' for p in ('weight', 'bias')}
    for i in range(config.n_layers):
        out |= {f'layers.{i}.{k}': v for k, v in _block_map(f'{prefix}transformer.blocks.{i}.').items()}
    return out


def _vit_map(config) -> dict:
    out = {
        'patch_embed.weight': 'patch_embedding.weight', 'patch_embed.bias': 'patch_embedding.bias',
        'cls_token': 'class_token', 'pos_embed': 'positional_embedding.pos_embedding',
        'head.weight': 'fc.weight', 'head.bias': 'fc.bias',
    }
    out |= {f'encoder.{k}': v for k, v in _encoder_map(config).items()}
    return out


def _keep(key_padding):
    return None if key_padding is None else torch.as_tensor(key_padding).bool()


VIT = Conventions(norm_placement='pre', activation='gelu', eps=1e-6, fully_masked_rows='undefined')
ALL_BIASES = {'attention': True, 'ffn': True, 'norm': True}

adapter = TorchModuleAdapter('lukemelas-vit', [
    TorchEntry('patch_embed', make=PatchEmbedding, forward=lambda m, images: m(images),
               param_map={'weight': 'patch_embedding.weight', 'bias': 'patch_embedding.bias'}, conventions=VIT),
    TorchEntry('encoder_layer', make=lambda c: Block(c.d_model, c.n_heads, c.d_ff, 0.1),
               forward=lambda m, x, key_padding=None: m(x, _keep(key_padding)),
               param_map=_block_map(), conventions=VIT,
               supports=ConfigSpace(split_heads=True, biases=ALL_BIASES)),
    TorchEntry('encoder', make=TransformerAndNorm,
               forward=lambda m, x, key_padding=None: m(x, _keep(key_padding)),
               param_map=_encoder_map, conventions=VIT,
               supports=ConfigSpace(split_heads=True, biases=ALL_BIASES)),
    TorchEntry('vit', make=make_vit, forward=lambda m, images: m(images),
               param_map=_vit_map, conventions=VIT,
               supports=ConfigSpace(split_heads=True, biases={**ALL_BIASES, 'head': True})),
])
