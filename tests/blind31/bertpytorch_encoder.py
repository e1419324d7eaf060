# fmt: off
# ruff: noqa
"""The encoder of codertimo's ``BERT-pytorch`` (``bert_pytorch/model``): ``BERT`` of
``TransformerBlock``s, each two ``SublayerConnection``s (pre-norm: ``x + dropout(sublayer(norm(x)))``)
around ``MultiHeadedAttention`` (a ModuleList of three linears, a shared ``Attention`` module) and
``PositionwiseFeedForward`` with its own tanh ``GELU``; its ``LayerNorm`` is the Annotated
Transformer's (``a_2``/``b_2``, unbiased std, eps added to the std). No final norm: the stack
ends on the last block. Then the kit's adapter (the glue at the end of the file). Blind set 31,
written for this benchmark."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- bert_pytorch/model/utils/gelu.py
class GELU(nn.Module):
    """
    Paper Section 3.4, last paragraph notice that BERT used the GELU instead of RELU
    """

    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


# ---- bert_pytorch/model/utils/layer_norm.py
class LayerNorm(nn.Module):
    "Construct a layernorm module (See citation for details)."

    def __init__(self, features, eps=1e-6):
        super(LayerNorm, self).__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


# ---- bert_pytorch/model/utils/sublayer.py
class SublayerConnection(nn.Module):
    """
    A residual connection followed by a layer norm.
    Note for code simplicity the norm is first as opposed to last.
    """

    def __init__(self, size, dropout):
        super(SublayerConnection, self).__init__()
        self.norm = LayerNorm(size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        "Apply residual connection to any sublayer with the same size."
        return x + self.dropout(sublayer(self.norm(x)))


# ---- bert_pytorch/model/utils/feed_forward.py
class PositionwiseFeedForward(nn.Module):
    "Implements FFN equation."

    def __init__(self, d_model, d_ff, dropout=0.1):
        super(PositionwiseFeedForward, self).__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = GELU()

    def forward(self, x):
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


# ---- bert_pytorch/model/attention/single.py
class Attention(nn.Module):
    """
    Compute 'Scaled Dot Product Attention
    """

    def forward(self, query, key, value, mask=None, dropout=None):
        scores = torch.matmul(query, key.transpose(-2, -1)) \
                 / math.sqrt(query.size(-1))

        if mask is not None:
            scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)

        p_attn = F.softmax(scores, dim=-1)

        if dropout is not None:
            p_attn = dropout(p_attn)

        return torch.matmul(p_attn, value), p_attn


# ---- bert_pytorch/model/attention/multi_head.py
class MultiHeadedAttention(nn.Module):
    """
    Take in model size and number of heads.
    """

    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        assert d_model % h == 0

        # We assume d_v always equals d_k
        self.d_k = d_model // h
        self.h = h

        self.linear_layers = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(3)])
        self.output_linear = nn.Linear(d_model, d_model)
        self.attention = Attention()

        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        batch_size = query.size(0)

        # 1) Do all the linear projections in batch from d_model => h x d_k
        query, key, value = [l(x).view(batch_size, -1, self.h, self.d_k).transpose(1, 2)
                             for l, x in zip(self.linear_layers, (query, key, value))]

        # 2) Apply attention on all the projected vectors in batch.
        x, attn = self.attention(query, key, value, mask=mask, dropout=self.dropout)

        # 3) "Concat" using a view and apply a final linear.
        x = x.transpose(1, 2).contiguous().view(batch_size, -1, self.h * self.d_k)

        return self.output_linear(x)


# ---- bert_pytorch/model/transformer.py
class TransformerBlock(nn.Module):
    """
    Bidirectional Encoder = Transformer (self-attention)
    Transformer = MultiHead_Attention + Feed_Forward with sublayer connection
    """

    def __init__(self, hidden, attn_heads, feed_forward_hidden, dropout):
        """
        :param hidden: hidden size of transformer
        :param attn_heads: head sizes of multi-head attention
        :param feed_forward_hidden: feed_forward_hidden, usually 4*hidden_size
        :param dropout: dropout rate
        """

        super().__init__()
        self.attention = MultiHeadedAttention(h=attn_heads, d_model=hidden)
        self.feed_forward = PositionwiseFeedForward(d_model=hidden, d_ff=feed_forward_hidden, dropout=dropout)
        self.input_sublayer = SublayerConnection(size=hidden, dropout=dropout)
        self.output_sublayer = SublayerConnection(size=hidden, dropout=dropout)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, mask):
        x = self.input_sublayer(x, lambda _x: self.attention.forward(_x, _x, _x, mask=mask))
        x = self.output_sublayer(x, self.feed_forward)
        return self.dropout(x)


# ---- bert_pytorch/model/bert.py (the transformer stack; the embedding lives in BERTEmbedding)
class BERT(nn.Module):
    """
    BERT model : Bidirectional Encoder Representations from Transformers.
    """

    def __init__(self, hidden=768, n_layers=12, attn_heads=12, dropout=0.1, feed_forward_hidden=None):
        """
        :param hidden: BERT model hidden size
        :param n_layers: numbers of Transformer blocks(layers)
        :param attn_heads: number of attention heads
        :param dropout: dropout rate
        """

        super().__init__()
        self.hidden = hidden
        self.n_layers = n_layers
        self.attn_heads = attn_heads

        # paper noted they used 4*hidden_size for ff_network_hidden_size
        self.feed_forward_hidden = feed_forward_hidden or hidden * 4

        # multi-layers transformer blocks, deep network
        self.transformer_blocks = nn.ModuleList(
            [TransformerBlock(hidden, attn_heads, self.feed_forward_hidden, dropout) for _ in range(n_layers)])

    def forward(self, x, segment_info=None, pad_mask=None):
        # attention masking for padded token
        # torch.ByteTensor([batch_size, 1, seq_len, seq_len)
        mask = pad_mask.unsqueeze(1).repeat(1, x.size(1), 1).unsqueeze(1)

        # running over multiple transformer blocks
        for transformer in self.transformer_blocks:
            x = transformer.forward(x, mask)

        return x


# ---- the kit's adapter (glue, not part of the port) -------------------------------------------

from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter  # noqa: E402
from tck.reference import Conventions  # noqa: E402


def _pad_mask(x, key_padding):
    """BERT.forward builds its mask from ``(x > 0)`` on token ids; here from the keep-mask."""
    if key_padding is None:
        key_padding = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
    return key_padding


def _layer_forward(block, x, key_padding=None):
    pad_mask = _pad_mask(x, key_padding)
    mask = pad_mask[:, None, None, :].expand(-1, 1, x.size(1), -1)
    return block(x, mask)


def _layer_map(prefix="", mine=""):
    out = {}
    for i, n in enumerate("qkv"):
        for p in ("weight", "bias"):
            out[f"{prefix}self_attn.{n}.{p}"] = f"{mine}attention.linear_layers.{i}.{p}"
    for p in ("weight", "bias"):
        out[f"{prefix}self_attn.o.{p}"] = f"{mine}attention.output_linear.{p}"
        out[f"{prefix}ffn.fc1.{p}"] = f"{mine}feed_forward.w_1.{p}"
        out[f"{prefix}ffn.fc2.{p}"] = f"{mine}feed_forward.w_2.{p}"
    out[f"{prefix}norm1.weight"] = f"{mine}input_sublayer.norm.a_2"
    out[f"{prefix}norm1.bias"] = f"{mine}input_sublayer.norm.b_2"
    out[f"{prefix}norm2.weight"] = f"{mine}output_sublayer.norm.a_2"
    out[f"{prefix}norm2.bias"] = f"{mine}output_sublayer.norm.b_2"
    return out


def _encoder_map(config):
    out = {}
    for i in range(config.n_layers):
        out |= _layer_map(f"layers.{i}.", f"transformer_blocks.{i}.")
    return out


_CONVENTIONS = Conventions(
    norm_placement="pre", activation="gelu_tanh", eps=1e-6, eps_placement="outside_sqrt",
    variance="unbiased", fully_masked_rows="uniform", final_norm="never",
)

adapter = TorchModuleAdapter("bertpytorch-encoder", [
    TorchEntry(
        "encoder_layer",
        make=lambda config: TransformerBlock(config.d_model, config.n_heads, config.d_ff, 0.1),
        forward=_layer_forward,
        param_map=_layer_map(),
        conventions=_CONVENTIONS,
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "encoder",
        make=lambda config: BERT(config.d_model, config.n_layers, config.n_heads, 0.1, config.d_ff),
        forward=lambda bert, x, key_padding=None: bert(x, pad_mask=_pad_mask(x, key_padding)),
        param_map=_encoder_map,
        conventions=_CONVENTIONS,
        supports=ConfigSpace(split_heads=True),
    ),
])
