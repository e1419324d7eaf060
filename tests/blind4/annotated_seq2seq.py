# fmt: off
# ruff: noqa: E501, B905
"""An encoder-decoder Transformer written the way "The Annotated Transformer" tutorial
(Harvard NLP) writes it.

``clones`` of one layer, ``SublayerConnection`` (pre-LN: ``x + dropout(sublayer(norm(x)))``),
a hand-written ``LayerNorm`` that divides by ``std + eps`` (torch's unbiased ``std``, eps
1e-6), ``MultiHeadedAttention`` with its four ``nn.Linear`` in a list and a module-level
``attention`` function that fills masked scores with -1e9 (so a query whose keys are all
masked averages every value), ``subsequent_mask`` for the decoder, embeddings scaled by
sqrt(d_model), the sinusoidal ``PositionalEncoding`` (sines on even dims, cosines on odd),
a final norm after each stack, ReLU FFN. The source and target embeddings and the generator
share one matrix (the paper's weight tying); the model returns the generator's logits (the
tutorial's ``log_softmax`` is left to the loss). Dropout is 0 in evaluation.

Written for transformer-tck's fourth blind diagnosis benchmark (tests/blind4/PROTOCOL.md).
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def clones(module, N):
    "Produce N identical layers."
    return nn.ModuleList([copy.deepcopy(module) for _ in range(N)])


class LayerNorm(nn.Module):
    "Construct a layernorm module (See citation for details)."

    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


class SublayerConnection(nn.Module):
    """A residual connection followed by a layer norm (the norm first, for code simplicity)."""

    def __init__(self, size, dropout):
        super().__init__()
        self.norm = LayerNorm(size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        "Apply residual connection to any sublayer with the same size."
        return x + self.dropout(sublayer(self.norm(x)))


def subsequent_mask(size):
    "Mask out subsequent positions."
    attn_shape = (1, size, size)
    subsequent = torch.triu(torch.ones(attn_shape), diagonal=1).type(torch.uint8)
    return subsequent == 0


def _softmax_dtype(dtype):
    # in float16/bfloat16 the softmax is taken in float32 (float64 stays float64)
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def attention(query, key, value, mask=None, dropout=None):
    "Compute 'Scaled Dot Product Attention'"
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
    p_attn = scores.softmax(dim=-1, dtype=_softmax_dtype(scores.dtype)).to(value.dtype)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1):
        "Take in model size and number of heads."
        super().__init__()
        assert d_model % h == 0
        self.d_k = d_model // h
        self.h = h
        self.linears = clones(nn.Linear(d_model, d_model), 4)
        self.attn = None
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            # Same mask applied to all h heads.
            mask = mask.unsqueeze(1)
        nbatches = query.size(0)

        # 1) Do all the linear projections in batch from d_model => h x d_k
        query, key, value = [
            lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value))
        ]

        # 2) Apply attention on all the projected vectors in batch.
        x, self.attn = attention(query, key, value, mask=mask, dropout=self.dropout)

        # 3) "Concat" using a view and apply a final linear.
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        del query
        del key
        del value
        return self.linears[-1](x)


class PositionwiseFeedForward(nn.Module):
    "Implements FFN equation."

    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(self.w_1(x).relu()))


class EncoderLayer(nn.Module):
    "Encoder is made up of self-attn and feed forward (defined below)"

    def __init__(self, size, self_attn, feed_forward, dropout):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.sublayer = clones(SublayerConnection(size, dropout), 2)
        self.size = size

    def forward(self, x, mask):
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, mask))
        return self.sublayer[1](x, self.feed_forward)


class Encoder(nn.Module):
    "Core encoder is a stack of N layers"

    def __init__(self, layer, N):
        super().__init__()
        self.layers = clones(layer, N)
        self.norm = LayerNorm(layer.size)

    def forward(self, x, mask):
        "Pass the input (and mask) through each layer in turn."
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class DecoderLayer(nn.Module):
    "Decoder is made of self-attn, src-attn, and feed forward (defined below)"

    def __init__(self, size, self_attn, src_attn, feed_forward, dropout):
        super().__init__()
        self.size = size
        self.self_attn = self_attn
        self.src_attn = src_attn
        self.feed_forward = feed_forward
        self.sublayer = clones(SublayerConnection(size, dropout), 3)

    def forward(self, x, memory, src_mask, tgt_mask):
        "Follow Figure 1 (right) for connections."
        m = memory
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, tgt_mask))
        x = self.sublayer[1](x, lambda x: self.src_attn(x, m, m, src_mask))
        return self.sublayer[2](x, self.feed_forward)


class Decoder(nn.Module):
    "Generic N layer decoder with masking."

    def __init__(self, layer, N):
        super().__init__()
        self.layers = clones(layer, N)
        self.norm = LayerNorm(layer.size)

    def forward(self, x, memory, src_mask, tgt_mask):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)


class Embeddings(nn.Module):
    def __init__(self, d_model, vocab, padding_idx=None):
        super().__init__()
        self.lut = nn.Embedding(vocab, d_model, padding_idx=padding_idx)
        self.d_model = d_model

    def forward(self, x):
        return self.lut(x) * math.sqrt(self.d_model)


class PositionalEncoding(nn.Module):
    "Implement the PE function."

    def __init__(self, d_model, dropout, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)

        # Compute the positional encodings once in log space.
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        position = torch.arange(0, max_len, dtype=torch.float64).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * -(math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[:, : x.size(1)].requires_grad_(False)
        return self.dropout(x)


class Generator(nn.Module):
    "Define standard linear + softmax generation step."

    def __init__(self, d_model, vocab):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab, bias=False)

    def forward(self, x):
        return self.proj(x)


class EncoderDecoder(nn.Module):
    """A standard Encoder-Decoder architecture."""

    def __init__(self, encoder, decoder, src_embed, tgt_embed, generator):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.src_embed = src_embed
        self.tgt_embed = tgt_embed
        self.generator = generator

    def forward(self, src, tgt, src_mask, tgt_mask):
        "Take in and process masked src and target sequences."
        return self.generator(self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask))

    def encode(self, src, src_mask):
        return self.encoder(self.src_embed(src), src_mask)

    def decode(self, memory, src_mask, tgt, tgt_mask):
        return self.decoder(self.tgt_embed(tgt), memory, src_mask, tgt_mask)


def make_model(src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1, max_len=5000, padding_idx=None):
    "Helper: Construct a model from hyperparameters."
    c = copy.deepcopy
    attn = MultiHeadedAttention(h, d_model)
    ff = PositionwiseFeedForward(d_model, d_ff, dropout)
    position = PositionalEncoding(d_model, dropout, max_len)
    model = EncoderDecoder(
        Encoder(EncoderLayer(d_model, c(attn), c(ff), dropout), N),
        Decoder(DecoderLayer(d_model, c(attn), c(attn), c(ff), dropout), N),
        nn.Sequential(Embeddings(d_model, src_vocab, padding_idx), c(position)),
        nn.Sequential(Embeddings(d_model, tgt_vocab, padding_idx), c(position)),
        Generator(d_model, tgt_vocab),
    )
    # share the source and target embeddings and the generator's weight (the paper's tying)
    model.tgt_embed[0].lut.weight = model.src_embed[0].lut.weight
    model.generator.proj.weight = model.src_embed[0].lut.weight
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    if padding_idx is not None:
        with torch.no_grad():
            model.src_embed[0].lut.weight[padding_idx].zero_()
    return model


# ---- the adapter -------------------------------------------------------------------------

ANNOTATED = Conventions(norm_placement="pre", eps=1e-6, eps_placement="outside_sqrt", variance="unbiased",
                        fully_masked_rows="uniform")


def _lin(ours: str, theirs: str) -> dict:
    return {f"{ours}.weight": f"{theirs}.weight", f"{ours}.bias": f"{theirs}.bias"}


def _mha_map(ours: str, theirs: str) -> dict:
    out = {}
    for i, name in enumerate("qkvo"):
        out.update(_lin(f"{ours}{name}", f"{theirs}linears.{i}"))
    return out


def _encoder_layer_map(ours: str, theirs: str) -> dict:
    out = _mha_map(f"{ours}self_attn.", f"{theirs}self_attn.")
    out.update(_norm(f"{ours}norm1", f"{theirs}sublayer.0.norm"))
    out.update(_norm(f"{ours}norm2", f"{theirs}sublayer.1.norm"))
    out.update(_lin(f"{ours}ffn.fc1", f"{theirs}feed_forward.w_1"))
    out.update(_lin(f"{ours}ffn.fc2", f"{theirs}feed_forward.w_2"))
    return out


def _norm(ours: str, theirs: str) -> dict:
    return {f"{ours}.weight": f"{theirs}.a_2", f"{ours}.bias": f"{theirs}.b_2"}


def _decoder_layer_map(ours: str, theirs: str) -> dict:
    out = _mha_map(f"{ours}self_attn.", f"{theirs}self_attn.")
    out.update(_mha_map(f"{ours}cross_attn.", f"{theirs}src_attn."))
    for i in range(3):
        out.update(_norm(f"{ours}norm{i + 1}", f"{theirs}sublayer.{i}.norm"))
    out.update(_lin(f"{ours}ffn.fc1", f"{theirs}feed_forward.w_1"))
    out.update(_lin(f"{ours}ffn.fc2", f"{theirs}feed_forward.w_2"))
    return out


def _seq2seq_map(config) -> dict:
    out = {"embedding.weight": "src_embed.0.lut.weight"}
    for i in range(config.n_layers):
        out.update(_encoder_layer_map(f"encoder.layers.{i}.", f"encoder.layers.{i}."))
    for i in range(config.n_decoder_layers):
        out.update(_decoder_layer_map(f"decoder.layers.{i}.", f"decoder.layers.{i}."))
    out.update(_norm("encoder.norm", "encoder.norm"))
    out.update(_norm("decoder.norm", "decoder.norm"))
    return out


def _self_mask(key_padding, causal, n):
    mask = None if key_padding is None else key_padding[:, None, :]  # [B, 1, Lk]
    if causal:
        sub = subsequent_mask(n).to(key_padding.device if key_padding is not None else "cpu")
        mask = sub if mask is None else mask & sub
    return mask


def _mha_forward(mha, query, key, value, key_padding=None, causal=False):
    mask = None if key_padding is None else key_padding[:, None, :]
    if causal:
        sub = torch.ones(1, query.size(1), key.size(1), dtype=torch.bool, device=query.device).tril()
        mask = sub if mask is None else mask & sub
    return mha(query, key, value, mask)


def _decoder_layer_forward(layer, x, memory, key_padding=None, memory_key_padding=None, causal=False):
    tgt_mask = _self_mask(key_padding, causal, x.size(1))
    src_mask = None if memory_key_padding is None else memory_key_padding[:, None, :]
    return layer(x, memory, src_mask, tgt_mask)


def _encoder_layer_forward(layer, x, key_padding=None, causal=False):
    return layer(x, _self_mask(key_padding, causal, x.size(1)))


def _seq2seq_forward(model, src_ids, tgt_ids, pad=0):
    # the tutorial's Batch: padding masks from the pad id, the target's and the subsequent mask
    src_mask = (src_ids != pad).unsqueeze(-2)
    tgt_mask = (tgt_ids != pad).unsqueeze(-2)
    tgt_mask = tgt_mask & subsequent_mask(tgt_ids.size(-1)).type_as(tgt_mask.data).to(tgt_ids.device)
    return model(src_ids, tgt_ids, src_mask, tgt_mask)


def _make(config):
    return make_model(config.vocab_size, config.vocab_size, N=config.n_layers, d_model=config.d_model,
                      d_ff=config.d_ff, h=config.n_heads, dropout=0.1, max_len=config.max_len,
                      padding_idx=config.padding_idx)


adapter = TorchModuleAdapter("annotated-seq2seq", [
    TorchEntry(
        "mha",
        make=lambda config: MultiHeadedAttention(config.n_heads, config.d_model),
        forward=_mha_forward,
        param_map=_mha_map("", ""),
        conventions=ANNOTATED,
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: EncoderLayer(config.d_model, MultiHeadedAttention(config.n_heads, config.d_model),
                                         PositionwiseFeedForward(config.d_model, config.d_ff), 0.1),
        forward=_encoder_layer_forward,
        param_map=_encoder_layer_map("", ""),
        conventions=ANNOTATED,
    ),
    TorchEntry(
        "decoder_layer",
        make=lambda config: DecoderLayer(config.d_model, MultiHeadedAttention(config.n_heads, config.d_model),
                                         MultiHeadedAttention(config.n_heads, config.d_model),
                                         PositionwiseFeedForward(config.d_model, config.d_ff), 0.1),
        forward=_decoder_layer_forward,
        param_map=_decoder_layer_map("", ""),
        conventions=ANNOTATED,
    ),
    TorchEntry(
        "seq2seq",
        make=_make,
        forward=_seq2seq_forward,
        param_map=_seq2seq_map,
        conventions=ANNOTATED,
    ),
])
