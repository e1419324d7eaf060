# fmt: off
# ruff: noqa
"""The encoder-decoder of PyTorch's tutorial "Language Translation with nn.Transformer and
torchtext" (``Seq2SeqTransformer``): ``nn.Transformer`` (post-LN, ReLU, sequence-first
layout, ``batch_first=False``), ``TokenEmbedding`` scaled by ``sqrt(emb_size)``, the tutorial's
``PositionalEncoding``, ``generate_square_subsequent_mask`` (a float mask of 0 and -inf),
key-padding masks with True = pad, and a ``generator`` linear."""

import math

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn import Transformer

PAD_IDX = 0


class PositionalEncoding(nn.Module):
    def __init__(self, emb_size: int, dropout: float, maxlen: int = 5000):
        super(PositionalEncoding, self).__init__()
        den = torch.exp(- torch.arange(0, emb_size, 2, dtype=torch.float64) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen, dtype=torch.float64).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size), dtype=torch.float64)
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        pos_embedding = pos_embedding.unsqueeze(-2)

        self.dropout = nn.Dropout(dropout)
        self.register_buffer('pos_embedding', pos_embedding)

    def forward(self, token_embedding: Tensor):
        return self.dropout(token_embedding + self.pos_embedding[:token_embedding.size(0), :])


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, emb_size):
        super(TokenEmbedding, self).__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size, padding_idx=PAD_IDX)
        self.emb_size = emb_size

    def forward(self, tokens: Tensor):
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


class Seq2SeqTransformer(nn.Module):
    def __init__(self, num_encoder_layers: int, num_decoder_layers: int, emb_size: int, nhead: int,
                 src_vocab_size: int, tgt_vocab_size: int, dim_feedforward: int = 512, dropout: float = 0.1, maxlen: int = 5000):
        super(Seq2SeqTransformer, self).__init__()
        self.transformer = Transformer(d_model=emb_size,
                                       nhead=nhead,
                                       num_encoder_layers=num_encoder_layers,
                                       num_decoder_layers=num_decoder_layers,
                                       dim_feedforward=dim_feedforward,
                                       dropout=dropout)
        self.generator = nn.Linear(emb_size, tgt_vocab_size, bias=False)
        self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout, maxlen=maxlen)

    def forward(self, src: Tensor, trg: Tensor, src_mask: Tensor, tgt_mask: Tensor,
                src_padding_mask: Tensor, tgt_padding_mask: Tensor, memory_key_padding_mask: Tensor):
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
        outs = self.transformer(src_emb, tgt_emb, src_mask, tgt_mask, None,
                                src_padding_mask, tgt_padding_mask, memory_key_padding_mask)
        return self.generator(outs)

    def encode(self, src: Tensor, src_mask: Tensor):
        return self.transformer.encoder(self.positional_encoding(self.src_tok_emb(src)), src_mask)

    def decode(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor):
        return self.transformer.decoder(self.positional_encoding(self.tgt_tok_emb(tgt)), memory, tgt_mask)


def generate_square_subsequent_mask(sz, device="cpu", dtype=torch.float32):
    mask = (torch.triu(torch.ones((sz, sz), device=device)) == 1).transpose(0, 1)
    mask = mask.to(dtype).masked_fill(mask == 0, float('-inf')).masked_fill(mask == 1, float(0.0))
    return mask


def create_mask(src, tgt, dtype=torch.float32):
    src_seq_len = src.shape[0]
    tgt_seq_len = tgt.shape[0]

    tgt_mask = generate_square_subsequent_mask(tgt_seq_len, src.device, dtype)
    src_mask = torch.zeros((src_seq_len, src_seq_len), device=src.device).type(torch.bool)

    src_padding_mask = (src == PAD_IDX).transpose(0, 1)
    tgt_padding_mask = (tgt == PAD_IDX).transpose(0, 1)
    return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask


# ---- the adapter: the kit speaks [B, L, ...] and keep-masks; the tutorial [L, B, ...] and pad-masks

from tck.adapters import Chunk, ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def make_model(config):
    return Seq2SeqTransformer(config.n_layers, config.n_decoder_layers, config.d_model, config.n_heads,
                              config.vocab_size, config.vocab_size, dim_feedforward=config.d_ff, dropout=0.1, maxlen=config.max_len)


def seq_first(x):
    return torch.as_tensor(x).transpose(0, 1)


def pad_mask(keep):
    return None if keep is None else ~torch.as_tensor(keep, dtype=torch.bool)


def causal_mask(x, causal):
    return generate_square_subsequent_mask(x.size(0), x.device, x.dtype) if causal else None


def run_pe(pe, positions):
    return pe.pos_embedding[torch.as_tensor(positions), 0, :]


def run_mha(attn, query, key, value, key_padding=None):
    out, _ = attn(seq_first(query), seq_first(key), seq_first(value), key_padding_mask=pad_mask(key_padding), need_weights=False)
    return out.transpose(0, 1)


def run_encoder(enc, x, key_padding=None, causal=False):
    src = seq_first(x)
    out = enc(src, causal_mask(src, causal), pad_mask(key_padding))
    return out.transpose(0, 1)


def run_decoder(dec, x, memory, key_padding=None, memory_key_padding=None, causal=False):
    tgt = seq_first(x)
    out = dec(tgt, seq_first(memory), tgt_mask=causal_mask(tgt, causal), tgt_key_padding_mask=pad_mask(key_padding), memory_key_padding_mask=pad_mask(memory_key_padding))
    return out.transpose(0, 1)


def run_seq2seq(model, src_ids, tgt_ids):
    src = seq_first(src_ids)
    tgt = seq_first(tgt_ids)
    dtype = model.generator.weight.dtype
    src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt, dtype)
    logits = model(src, tgt, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, src_padding_mask)
    return logits.transpose(0, 1)


def _attn_map(prefix, out_prefix, name="self_attn."):
    m = {}
    for p in ("weight", "bias"):
        m |= {f"{out_prefix}{n}.{p}": Chunk(f"{prefix}{name}in_proj_{p}", i, 3) for i, n in enumerate("qkv")}
        m[f"{out_prefix}o.{p}"] = f"{prefix}{name}out_proj.{p}"
    return m


def _enc_layer_map(prefix, out_prefix=""):
    m = _attn_map(prefix, out_prefix + "self_attn.")
    for p in ("weight", "bias"):
        m |= {f"{out_prefix}norm1.{p}": f"{prefix}norm1.{p}", f"{out_prefix}norm2.{p}": f"{prefix}norm2.{p}"}
        m |= {f"{out_prefix}ffn.fc1.{p}": f"{prefix}linear1.{p}", f"{out_prefix}ffn.fc2.{p}": f"{prefix}linear2.{p}"}
    return m


def _dec_layer_map(prefix, out_prefix=""):
    m = _attn_map(prefix, out_prefix + "self_attn.") | _attn_map(prefix, out_prefix + "cross_attn.", "multihead_attn.")
    for p in ("weight", "bias"):
        m |= {f"{out_prefix}norm{i}.{p}": f"{prefix}norm{i}.{p}" for i in (1, 2, 3)}
        m |= {f"{out_prefix}ffn.fc1.{p}": f"{prefix}linear1.{p}", f"{out_prefix}ffn.fc2.{p}": f"{prefix}linear2.{p}"}
    return m


def _stack_map(layer_map, n, prefix="", out_prefix=""):
    m = {}
    for i in range(n):
        m |= layer_map(f"{prefix}layers.{i}.", f"{out_prefix}layers.{i}.")
    for p in ("weight", "bias"):
        m[f"{out_prefix}norm.{p}"] = f"{prefix}norm.{p}"
    return m


def _seq2seq_map(config):
    m = {"src_embedding.weight": "src_tok_emb.embedding.weight", "tgt_embedding.weight": "tgt_tok_emb.embedding.weight"}
    m |= {"generator.weight": "generator.weight"}
    m |= _stack_map(_enc_layer_map, config.n_layers, "transformer.encoder.", "encoder.")
    m |= _stack_map(_dec_layer_map, config.n_decoder_layers, "transformer.decoder.", "decoder.")
    return m


STACK = Conventions(final_norm="always")
SPACE = ConfigSpace(split_heads=True, max_len=512)

adapter = TorchModuleAdapter("torchnn-seq2seq", [
    TorchEntry(
        "sinusoidal_pe",
        make=lambda config: make_model(config).positional_encoding,
        forward=run_pe,
        supports=ConfigSpace(max_len=512),
    ),
    TorchEntry(
        "mha",
        make=lambda config: make_model(config).transformer.encoder.layers[0].self_attn,
        forward=run_mha,
        param_map=_attn_map("", "", ""),
                supports=SPACE,
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: make_model(config).transformer.encoder.layers[0],
        forward=run_encoder,
        param_map=_enc_layer_map(""),
                supports=SPACE,
    ),
    TorchEntry(
        "decoder_layer",
        make=lambda config: make_model(config).transformer.decoder.layers[0],
        forward=run_decoder,
        param_map=_dec_layer_map(""),
                supports=SPACE,
    ),
    TorchEntry(
        "encoder",
        make=lambda config: make_model(config).transformer.encoder,
        forward=run_encoder,
        param_map=lambda config: _stack_map(_enc_layer_map, config.n_layers),
        conventions=STACK,
        supports=SPACE,
    ),
    TorchEntry(
        "decoder",
        make=lambda config: make_model(config).transformer.decoder,
        forward=run_decoder,
        param_map=lambda config: _stack_map(_dec_layer_map, config.n_decoder_layers),
        conventions=STACK,
        supports=SPACE,
    ),
    TorchEntry(
        "seq2seq",
        make=make_model,
        forward=run_seq2seq,
        param_map=_seq2seq_map,
        conventions=STACK,
        supports=ConfigSpace(split_heads=True, max_len=512, tied=False),
    ),
])
