# fmt: off
# ruff: noqa
"""An encoder as transformers' DistilBERT writes it (modeling_distilbert.py).

Embeddings with sinusoidal_pos_embds=True (the table written by create_sinusoidal_embeddings:
sin at even, cos at odd columns, computed in numpy in float64 and stored in the table's dtype) plus a
LayerNorm over word + position embeddings; MultiHeadSelfAttention with q_lin / k_lin / v_lin /
out_lin, shape / unshape helpers, q divided by sqrt(dim_per_head) before the matmul, the mask
(mask == 0).view(mask_reshp).expand_as(scores) filled with torch.finfo(scores.dtype).min;
TransformerBlock post-LN (sa_layer_norm, output_layer_norm) with a GELU FFN (lin1, lin2).
"""

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn

from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


@dataclass
class DistilBertConfig:
    vocab_size: int = 30522
    max_position_embeddings: int = 512
    sinusoidal_pos_embds: bool = True
    n_layers: int = 6
    n_heads: int = 12
    dim: int = 768
    hidden_dim: int = 3072
    dropout: float = 0.1
    attention_dropout: float = 0.1
    activation: str = "gelu"
    pad_token_id: int = 0


def create_sinusoidal_embeddings(n_pos: int, dim: int, out: torch.Tensor):
    position_enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)])
    out.requires_grad = False
    out[:, 0::2] = torch.as_tensor(np.sin(position_enc[:, 0::2]), dtype=out.dtype)
    out[:, 1::2] = torch.as_tensor(np.cos(position_enc[:, 1::2]), dtype=out.dtype)
    out.detach_()


class Embeddings(nn.Module):
    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.dim, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.dim)
        self.LayerNorm = nn.LayerNorm(config.dim, eps=1e-12)
        self.dropout = nn.Dropout(config.dropout)
        if config.sinusoidal_pos_embds:
            create_sinusoidal_embeddings(config.max_position_embeddings, config.dim, self.position_embeddings.weight)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seq_length = input_ids.size(1)
        position_ids = torch.arange(seq_length, dtype=torch.long, device=input_ids.device)
        position_ids = position_ids.unsqueeze(0).expand_as(input_ids)
        embeddings = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        embeddings = self.LayerNorm(embeddings)
        return self.dropout(embeddings)


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.dim = config.dim
        self.dropout = nn.Dropout(p=config.attention_dropout)
        self.q_lin = nn.Linear(config.dim, config.dim)
        self.k_lin = nn.Linear(config.dim, config.dim)
        self.v_lin = nn.Linear(config.dim, config.dim)
        self.out_lin = nn.Linear(config.dim, config.dim)

    def forward(self, query, key, value, mask):
        bs, q_length, dim = query.size()
        k_length = key.size(1)
        dim_per_head = self.dim // self.n_heads
        mask_reshp = (bs, 1, 1, k_length)

        def shape(x):
            """separate heads"""
            return x.view(bs, -1, self.n_heads, dim_per_head).transpose(1, 2)

        def unshape(x):
            """group heads"""
            return x.transpose(1, 2).contiguous().view(bs, -1, self.n_heads * dim_per_head)

        q = shape(self.q_lin(query))  # (bs, n_heads, q_length, dim_per_head)
        k = shape(self.k_lin(key))  # (bs, n_heads, k_length, dim_per_head)
        v = shape(self.v_lin(value))  # (bs, n_heads, k_length, dim_per_head)

        q = q / math.sqrt(dim_per_head)  # (bs, n_heads, q_length, dim_per_head)
        scores = torch.matmul(q, k.transpose(2, 3))  # (bs, n_heads, q_length, k_length)
        mask = (mask == 0).view(mask_reshp).expand_as(scores)  # (bs, n_heads, q_length, k_length)
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)

        weights = nn.functional.softmax(scores, dim=-1)  # (bs, n_heads, q_length, k_length)
        weights = self.dropout(weights)  # (bs, n_heads, q_length, k_length)

        context = torch.matmul(weights, v)  # (bs, n_heads, q_length, dim_per_head)
        context = unshape(context)  # (bs, q_length, dim)
        context = self.out_lin(context)  # (bs, q_length, dim)
        return (context,)


class FFN(nn.Module):
    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.dropout = nn.Dropout(p=config.dropout)
        self.lin1 = nn.Linear(config.dim, config.hidden_dim)
        self.lin2 = nn.Linear(config.hidden_dim, config.dim)
        self.activation = nn.GELU()

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = self.lin1(input)
        x = self.activation(x)
        x = self.lin2(x)
        x = self.dropout(x)
        return x


class TransformerBlock(nn.Module):
    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.attention = MultiHeadSelfAttention(config)
        self.sa_layer_norm = nn.LayerNorm(normalized_shape=config.dim, eps=1e-12)
        self.ffn = FFN(config)
        self.output_layer_norm = nn.LayerNorm(normalized_shape=config.dim, eps=1e-12)

    def forward(self, x, attn_mask=None):
        sa_output = self.attention(query=x, key=x, value=x, mask=attn_mask)[0]
        sa_output = self.sa_layer_norm(sa_output + x)  # (bs, seq_length, dim)

        ffn_output = self.ffn(sa_output)  # (bs, seq_length, dim)
        ffn_output = self.output_layer_norm(ffn_output + sa_output)  # (bs, seq_length, dim)
        return (ffn_output,)


class Transformer(nn.Module):
    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.n_layers = config.n_layers
        self.layer = nn.ModuleList([TransformerBlock(config) for _ in range(config.n_layers)])

    def forward(self, x, attn_mask=None):
        hidden_state = x
        for layer_module in self.layer:
            layer_outputs = layer_module(x=hidden_state, attn_mask=attn_mask)
            hidden_state = layer_outputs[-1]
        return (hidden_state,)


# ---- the adapter

def _config(config) -> DistilBertConfig:
    return DistilBertConfig(
        vocab_size=config.vocab_size, max_position_embeddings=config.max_len, n_layers=config.n_layers,
        n_heads=config.n_heads, dim=config.d_model, hidden_dim=config.d_ff,
    )


ATTN = {"q": "q_lin", "k": "k_lin", "v": "v_lin", "o": "out_lin"}


def _attn_map(prefix, mine):
    return {f"{prefix}{c}.{p}": f"{mine}{n}.{p}" for c, n in ATTN.items() for p in ("weight", "bias")}


def _layer_map(prefix, mine):
    m = _attn_map(f"{prefix}self_attn.", f"{mine}attention.")
    for p in ("weight", "bias"):
        m[f"{prefix}norm1.{p}"] = f"{mine}sa_layer_norm.{p}"
        m[f"{prefix}norm2.{p}"] = f"{mine}output_layer_norm.{p}"
        m[f"{prefix}ffn.fc1.{p}"] = f"{mine}ffn.lin1.{p}"
        m[f"{prefix}ffn.fc2.{p}"] = f"{mine}ffn.lin2.{p}"
    return m


def _encoder_map(config):
    m = {}
    for i in range(config.n_layers):
        m |= _layer_map(f"layers.{i}.", f"layer.{i}.")
    return m


def _keep(x, key_padding):
    # DistilBERT's attention_mask: 1 = a real token, 0 = padding
    if key_padding is None:
        return torch.ones(x.shape[:2], dtype=torch.long, device=x.device)
    return torch.as_tensor(key_padding).long()


def make_embeddings(config):
    # as DistilBertPreTrainedModel._init_weights does after the model is built in its dtype:
    # the table is written again, here in float64, so a float64 build holds it exactly
    cfg = _config(config)
    module = Embeddings(cfg).to(torch.float64)
    create_sinusoidal_embeddings(cfg.max_position_embeddings, cfg.dim, module.position_embeddings.weight)
    return module


def pe_forward(module, positions):
    return module.position_embeddings(torch.as_tensor(positions, dtype=torch.long))


def mha_forward(module, query, key, value, key_padding=None):
    return module(query, key, value, _keep(key, key_padding))[0]


def layer_forward(module, x, key_padding=None):
    return module(x, _keep(x, key_padding))[0]


def encoder_forward(module, x, key_padding=None):
    return module(x, _keep(x, key_padding))[0]


# post-LN, exact GELU, eps 1e-12; a row with every key masked gets uniform weights (finfo.min)
BERT = Conventions(norm_placement="post", activation="gelu", eps=1e-12, fully_masked_rows="uniform")

adapter = TorchModuleAdapter("distilbert-encoder", [
    TorchEntry(
        "sinusoidal_pe",
        make=make_embeddings,
        forward=pe_forward,
        param_map={},
        conventions=Conventions(),
        supports=ConfigSpace(max_len=512),
    ),
    TorchEntry(
        "mha",
        make=lambda config: MultiHeadSelfAttention(_config(config)),
        forward=mha_forward,
        param_map=_attn_map("", ""),
        conventions=Conventions(fully_masked_rows="uniform"),
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: TransformerBlock(_config(config)),
        forward=layer_forward,
        param_map=_layer_map("", ""),
        conventions=BERT,
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "encoder",
        make=lambda config: Transformer(_config(config)),
        forward=encoder_forward,
        param_map=_encoder_map,
        conventions=BERT,
        supports=ConfigSpace(split_heads=True),
    ),
])
