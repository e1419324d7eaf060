# fmt: off
# ruff: noqa
"""The Transformer encoder of Dive into Deep Learning (d2l.ai, chapter "The Transformer
Architecture", PyTorch tab): ``MultiHeadAttention`` with ``transpose_qkv`` /
``transpose_output``, ``DotProductAttention`` over ``masked_softmax(X, valid_lens)`` (masked
scores replaced by ``-1e6``), ``AddNorm`` (post-LN, ``ln(dropout(Y) + X)``),
``PositionWiseFFN`` with ReLU, ``PositionalEncoding`` (``P[:, :, 0::2] = sin``, ``1::2 = cos``)
added after ``X * sqrt(num_hiddens)``, and ``TransformerEncoderBlock`` / ``TransformerEncoder``.

The kit's boolean keep-masks become d2l's ``valid_lens`` in ``to_valid_lens`` (see there).
Written for the twenty-first blind benchmark (tests/blind21).
"""

import math

import torch
from torch import nn

from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def masked_softmax(X, valid_lens):
    """Perform softmax operation by masking elements on the last axis."""
    # X: 3D tensor, valid_lens: 1D or 2D tensor of lengths, or a keep-mask shaped like X
    def _sequence_mask(X, valid_len, value=0):
        maxlen = X.size(1)
        mask = torch.arange((maxlen), dtype=torch.float32, device=X.device)[None, :] < valid_len[:, None]
        X[~mask] = value
        return X

    X = X.to(torch.promote_types(X.dtype, torch.float32))
    if valid_lens is None:
        return nn.functional.softmax(X, dim=-1)
    if valid_lens.dtype == torch.bool:
        return nn.functional.softmax(X.masked_fill(~valid_lens, -1e6), dim=-1)
    shape = X.shape
    if valid_lens.dim() == 1:
        valid_lens = torch.repeat_interleave(valid_lens, shape[1])
    else:
        valid_lens = valid_lens.reshape(-1)
    # On the last axis, replace masked elements with a very large negative
    # value, whose exponentiation outputs 0
    X = _sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)
    return nn.functional.softmax(X.reshape(shape), dim=-1)


class DotProductAttention(nn.Module):
    """Scaled dot product attention."""
    def __init__(self, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    # Shape of queries: (batch_size, no. of queries, d)
    # Shape of keys: (batch_size, no. of key-value pairs, d)
    # Shape of values: (batch_size, no. of key-value pairs, value dimension)
    def forward(self, queries, keys, values, valid_lens=None):
        d = queries.shape[-1]
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        self.attention_weights = masked_softmax(scores, valid_lens).to(values.dtype)
        return torch.bmm(self.dropout(self.attention_weights), values)


class MultiHeadAttention(nn.Module):
    """Multi-head attention."""
    def __init__(self, num_hiddens, num_heads, dropout, bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.attention = DotProductAttention(dropout)
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_v = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    def forward(self, queries, keys, values, valid_lens):
        # Shape of queries, keys, or values:
        # (batch_size, no. of queries or key-value pairs, num_hiddens)
        # After transposing, shape of output queries, keys, or values:
        # (batch_size * num_heads, no. of queries or key-value pairs,
        # num_hiddens / num_heads)
        queries = self.transpose_qkv(self.W_q(queries))
        keys = self.transpose_qkv(self.W_k(keys))
        values = self.transpose_qkv(self.W_v(values))

        if valid_lens is not None:
            # On axis 0, copy the first item (scalar or vector) for num_heads
            # times, then copy the next item, and so on
            valid_lens = torch.repeat_interleave(valid_lens, repeats=self.num_heads, dim=0)

        # Shape of output: (batch_size * num_heads, no. of queries,
        # num_hiddens / num_heads)
        output = self.attention(queries, keys, values, valid_lens)
        # Shape of output_concat: (batch_size, no. of queries, num_hiddens)
        output_concat = self.transpose_output(output)
        return self.W_o(output_concat)

    def transpose_qkv(self, X):
        """Transposition for parallel computation of multiple attention heads."""
        # Shape of input X: (batch_size, no. of queries or key-value pairs,
        # num_hiddens). Shape of output X: (batch_size, no. of queries or
        # key-value pairs, num_heads, num_hiddens / num_heads)
        X = X.reshape(X.shape[0], X.shape[1], self.num_heads, -1)
        # Shape of output X: (batch_size, num_heads, no. of queries or key-value
        # pairs, num_hiddens / num_heads)
        X = X.permute(0, 2, 1, 3)
        # Shape of output: (batch_size * num_heads, no. of queries or key-value
        # pairs, num_hiddens / num_heads)
        return X.reshape(-1, X.shape[2], X.shape[3])

    def transpose_output(self, X):
        """Reverse the operation of transpose_qkv."""
        X = X.reshape(-1, self.num_heads, X.shape[1], X.shape[2])
        X = X.permute(0, 2, 1, 3)
        return X.reshape(X.shape[0], X.shape[1], -1)


class PositionalEncoding(nn.Module):
    """Positional encoding."""
    def __init__(self, num_hiddens, dropout, max_len=1000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        # Create a long enough P
        P = torch.zeros((1, max_len, num_hiddens), dtype=torch.float64)
        X = torch.arange(max_len, dtype=torch.float64).reshape(-1, 1) / torch.pow(
            10000, torch.arange(0, num_hiddens, 2, dtype=torch.float64) / num_hiddens)
        P[:, :, 0::2] = torch.sin(X)
        P[:, :, 1::2] = torch.cos(X)
        self.register_buffer("P", P, persistent=False)

    def forward(self, X):
        X = X + self.P[:, :X.shape[1], :].to(X.device)
        return self.dropout(X)


class PositionWiseFFN(nn.Module):
    """The positionwise feed-forward network."""
    def __init__(self, num_hiddens, ffn_num_hiddens, ffn_num_outputs):
        super().__init__()
        self.dense1 = nn.Linear(num_hiddens, ffn_num_hiddens)
        self.relu = nn.ReLU()
        self.dense2 = nn.Linear(ffn_num_hiddens, ffn_num_outputs)

    def forward(self, X):
        return self.dense2(self.relu(self.dense1(X)))


class AddNorm(nn.Module):
    """The residual connection followed by layer normalization."""
    def __init__(self, norm_shape, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.ln = nn.LayerNorm(norm_shape)

    def forward(self, X, Y):
        return self.ln(self.dropout(Y) + X)


class TransformerEncoderBlock(nn.Module):
    """The Transformer encoder block."""
    def __init__(self, num_hiddens, ffn_num_hiddens, num_heads, dropout, use_bias=False):
        super().__init__()
        self.attention = MultiHeadAttention(num_hiddens, num_heads, dropout, use_bias)
        self.addnorm1 = AddNorm(num_hiddens, dropout)
        self.ffn = PositionWiseFFN(num_hiddens, ffn_num_hiddens, num_hiddens)
        self.addnorm2 = AddNorm(num_hiddens, dropout)

    def forward(self, X, valid_lens):
        Y = self.addnorm1(X, self.attention(X, X, X, valid_lens))
        return self.addnorm2(Y, self.ffn(Y))


class TransformerEncoder(nn.Module):
    """The Transformer encoder."""
    def __init__(self, vocab_size, num_hiddens, ffn_num_hiddens, num_heads,
                 num_blks, dropout, use_bias=False, max_len=1000):
        super().__init__()
        self.num_hiddens = num_hiddens
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        self.pos_encoding = PositionalEncoding(num_hiddens, dropout, max_len)
        self.blks = nn.Sequential()
        for i in range(num_blks):
            self.blks.add_module("block" + str(i), TransformerEncoderBlock(
                num_hiddens, ffn_num_hiddens, num_heads, dropout, use_bias))

    def forward(self, X, valid_lens):
        # Since positional encoding values are between -1 and 1, the embedding
        # values are multiplied by the square root of the embedding dimension
        # to rescale before they are summed up
        X = self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens))
        return self.encode(X, valid_lens)

    def encode(self, X, valid_lens):
        self.attention_weights = [None] * len(self.blks)
        for i, blk in enumerate(self.blks):
            X = blk(X, valid_lens)
            self.attention_weights[
                i] = blk.attention.attention.attention_weights
        return X


# ---- the adapter ------------------------------------------------------------------------


def to_valid_lens(key_padding, causal, batch_size, num_queries, num_keys):
    """The kit's keep-masks as d2l's ``valid_lens``: every query row's kept keys must be a
    prefix of the keys (right padding, a causal mask, or both) to be lengths: 1-D ``[B]``
    (one length per sequence, d2l's encoder) without a causal mask, 2-D ``[B, Lq]`` (one per
    query, d2l's decoder) with one; any other pattern (left padding) is passed as the boolean
    keep-mask ``[B, Lq, Lk]`` itself, which ``masked_softmax`` fills the same way."""
    if key_padding is None and not causal:
        return None
    keep = torch.ones((batch_size, num_queries, num_keys), dtype=torch.bool)
    if key_padding is not None:
        keep = keep & key_padding.bool()[:, None, :]
    if causal:
        keep = keep & torch.ones((num_queries, num_keys), dtype=torch.bool).tril()
    lens = keep.sum(dim=-1)
    if not torch.equal(torch.arange(num_keys)[None, None, :] < lens[..., None], keep):
        return keep
    return lens if causal else lens[:, 0]


def is_causal(causal):
    return causal is not None and bool(causal)


def mha_forward(attn, query, key, value, key_padding=None, causal=None):
    valid_lens = to_valid_lens(key_padding, is_causal(causal), query.shape[0], query.shape[1], key.shape[1])
    return attn(query, key, value, valid_lens)


def layer_forward(blk, x, key_padding=None, causal=None):
    valid_lens = to_valid_lens(key_padding, is_causal(causal), x.shape[0], x.shape[1], x.shape[1])
    return blk(x, valid_lens)


def encoder_forward(encoder, x, key_padding=None, causal=None):
    valid_lens = to_valid_lens(key_padding, is_causal(causal), x.shape[0], x.shape[1], x.shape[1])
    return encoder.encode(x, valid_lens)


def pe_forward(pe, positions):
    return pe.P[0, positions]


def make_encoder(config):
    encoder = TransformerEncoder(config.vocab_size, config.d_model, config.d_ff, config.n_heads,
                                 config.n_layers, 0.1, True, config.max_len)
    del encoder.embedding  # the canonical encoder is the stack of blocks alone
    return encoder


def attention_map(prefix, mine):
    return {f"{prefix}{c}.{p}": f"{mine}W_{c}.{p}" for c in "qkvo" for p in ("weight", "bias")}


def block_map(prefix, mine):
    names = attention_map(f"{prefix}self_attn.", f"{mine}attention.")
    for p in ("weight", "bias"):
        names[f"{prefix}norm1.{p}"] = f"{mine}addnorm1.ln.{p}"
        names[f"{prefix}norm2.{p}"] = f"{mine}addnorm2.ln.{p}"
        names[f"{prefix}ffn.fc1.{p}"] = f"{mine}ffn.dense1.{p}"
        names[f"{prefix}ffn.fc2.{p}"] = f"{mine}ffn.dense2.{p}"
    return names


def encoder_map(config):
    names = {}
    for i in range(config.n_layers):
        names |= block_map(f"layers.{i}.", f"blks.block{i}.")
    return names


DECLARED = Conventions(fully_masked_rows="uniform")

adapter = TorchModuleAdapter("d2l-encoder", [
    TorchEntry(
        "sinusoidal_pe",
        make=lambda config: PositionalEncoding(config.d_model, 0.1, config.max_len),
        forward=pe_forward,
        supports=ConfigSpace(max_len=1000),
    ),
    TorchEntry(
        "mha",
        make=lambda config: MultiHeadAttention(config.d_model, config.n_heads, 0.1, True),
        forward=mha_forward,
        param_map=attention_map("", ""),
        conventions=DECLARED,
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: TransformerEncoderBlock(config.d_model, config.d_ff, config.n_heads, 0.1, True),
        forward=layer_forward,
        param_map=block_map("", ""),
        conventions=DECLARED,
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "encoder",
        make=make_encoder,
        forward=encoder_forward,
        param_map=encoder_map,
        conventions=DECLARED,
        supports=ConfigSpace(split_heads=True, max_len=1000),
    ),
])
