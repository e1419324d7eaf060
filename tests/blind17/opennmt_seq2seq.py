# fmt: off
# ruff: noqa
"""The encoder-decoder of OpenNMT-py (onmt/modules/multi_headed_attn.py,
onmt/modules/position_ffn.py, onmt/modules/embeddings.py, onmt/encoders/transformer.py,
onmt/decoders/transformer.py): pre-LN layers, MultiHeadedAttention with shape/unshape and the
query divided by sqrt(dim_per_head) before the matmul, boolean masks (True = hide) filled with
-1e18, the decoder's future mask triu(ones, 1) OR-ed with the target pad mask, a sequence-first
PositionalEncoding table [max_len, 1, dim] (sin at even, cos at odd columns) added after
emb * sqrt(dim), PositionwiseFeedForward with ReLU and its own layer_norm, a final layer_norm on
each stack and a generator linear."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class PositionalEncoding(nn.Module):
    """Sinusoidal positional encoding for non-recurrent neural networks."""

    def __init__(self, dropout, dim, max_len=5000):
        if dim % 2 != 0:
            raise ValueError("Cannot use sin/cos positional encoding with odd dim (got dim={:d})".format(dim))
        pe = torch.zeros(max_len, dim, dtype=torch.float64)
        position = torch.arange(0, max_len, dtype=torch.float64).unsqueeze(1)
        div_term = torch.exp((torch.arange(0, dim, 2, dtype=torch.float64) * -(math.log(10000.0) / dim)))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(1)
        super().__init__()
        self.register_buffer("pe", pe)
        self.dropout = nn.Dropout(p=dropout)
        self.dim = dim

    def forward(self, emb, step=None):
        """emb: [seq_len, batch_size, dim]"""
        emb = emb * math.sqrt(self.dim)
        if step is None:
            if self.pe.size(0) < emb.size(0):
                raise ValueError(f"Sequence is {emb.size(0)} but PositionalEncoding is limited to {self.pe.size(0)}.")
            emb = emb + self.pe[:emb.size(0)]
        else:
            emb = emb + self.pe[step]
        emb = self.dropout(emb)
        return emb


class Embeddings(nn.Module):
    def __init__(self, word_vec_size, word_vocab_size, word_padding_idx, dropout=0.1, max_len=5000):
        super().__init__()
        self.word_padding_idx = word_padding_idx
        self.word_vec_size = word_vec_size
        self.word_lut = nn.Embedding(word_vocab_size, word_vec_size, padding_idx=word_padding_idx)
        self.pe = PositionalEncoding(dropout, word_vec_size, max_len)

    def forward(self, source, step=None):
        """source: [len, batch] token ids -> [len, batch, dim]"""
        emb = self.word_lut(source)
        emb = self.pe(emb, step=step)
        return emb


class MultiHeadedAttention(nn.Module):
    def __init__(self, head_count, model_dim, dropout=0.1):
        assert model_dim % head_count == 0
        self.dim_per_head = model_dim // head_count
        self.model_dim = model_dim
        super().__init__()
        self.head_count = head_count
        self.linear_keys = nn.Linear(model_dim, head_count * self.dim_per_head)
        self.linear_values = nn.Linear(model_dim, head_count * self.dim_per_head)
        self.linear_query = nn.Linear(model_dim, head_count * self.dim_per_head)
        self.softmax = nn.Softmax(dim=-1)
        self.dropout = nn.Dropout(dropout)
        self.final_linear = nn.Linear(model_dim, model_dim)

    def forward(self, key, value, query, mask=None):
        """key, value [batch, key_len, dim], query [batch, query_len, dim],
        mask [batch, 1 or query_len, key_len] (True = hide)."""
        batch_size = key.size(0)
        dim_per_head = self.dim_per_head
        head_count = self.head_count

        def shape(x):
            """Projection."""
            return x.view(batch_size, -1, head_count, dim_per_head).transpose(1, 2)

        def unshape(x):
            """Compute context."""
            return x.transpose(1, 2).contiguous().view(batch_size, -1, head_count * dim_per_head)

        key = self.linear_keys(key)
        value = self.linear_values(value)
        query = self.linear_query(query)
        key = shape(key)
        value = shape(value)
        query = shape(query)

        query = query / math.sqrt(dim_per_head)
        query_key = torch.matmul(query, key.transpose(2, 3))
        scores = query_key.to(torch.promote_types(query_key.dtype, torch.float32))

        if mask is not None:
            mask = mask.unsqueeze(1)  # [B, 1, 1|T_q, T_k]
            scores = scores.masked_fill(mask, -1e18)

        attn = self.softmax(scores).to(query.dtype)
        drop_attn = self.dropout(attn)

        context_original = torch.matmul(drop_attn, value)
        context = unshape(context_original)
        output = self.final_linear(context)
        return output, attn


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.dropout_1 = nn.Dropout(dropout)
        self.relu = nn.ReLU()
        self.dropout_2 = nn.Dropout(dropout)

    def forward(self, x):
        inter = self.dropout_1(self.relu(self.w_1(self.layer_norm(x))))
        output = self.dropout_2(self.w_2(inter))
        return output + x


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout, attention_dropout):
        super().__init__()
        self.self_attn = MultiHeadedAttention(heads, d_model, dropout=attention_dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.dropout = nn.Dropout(dropout)

    def forward(self, inputs, mask):
        """inputs [batch, src_len, dim], mask [batch, 1, src_len] (True = pad)"""
        input_norm = self.layer_norm(inputs)
        context, _ = self.self_attn(input_norm, input_norm, input_norm, mask=mask)
        out = self.dropout(context) + inputs
        return self.feed_forward(out)


class TransformerEncoder(nn.Module):
    def __init__(self, num_layers, d_model, heads, d_ff, dropout, attention_dropout, embeddings=None):
        super().__init__()
        self.embeddings = embeddings
        self.transformer = nn.ModuleList(
            [TransformerEncoderLayer(d_model, heads, d_ff, dropout, attention_dropout) for i in range(num_layers)])
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)

    def forward(self, out, mask):
        """out [batch, src_len, dim] (embedded), mask [batch, 1, src_len] (True = pad)"""
        for layer in self.transformer:
            out = layer(out, mask)
        out = self.layer_norm(out)
        return out


class TransformerDecoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout, attention_dropout):
        super().__init__()
        self.self_attn = MultiHeadedAttention(heads, d_model, dropout=attention_dropout)
        self.context_attn = MultiHeadedAttention(heads, d_model, dropout=attention_dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.layer_norm_1 = nn.LayerNorm(d_model, eps=1e-6)
        self.layer_norm_2 = nn.LayerNorm(d_model, eps=1e-6)
        self.drop = nn.Dropout(dropout)

    def forward(self, inputs, memory_bank, src_pad_mask, tgt_pad_mask, future=True):
        """inputs [batch, tgt_len, dim], memory_bank [batch, src_len, dim],
        src_pad_mask [batch, 1, src_len], tgt_pad_mask [batch, 1, tgt_len] (True = pad)"""
        dec_mask = tgt_pad_mask
        if future:
            tgt_len = tgt_pad_mask.size(-1)
            future_mask = torch.triu(torch.ones(tgt_len, tgt_len, dtype=torch.bool, device=inputs.device), 1)
            future_mask = future_mask.view(1, tgt_len, tgt_len)
            dec_mask = torch.gt(tgt_pad_mask | future_mask, 0)

        input_norm = self.layer_norm_1(inputs)
        query, _ = self.self_attn(input_norm, input_norm, input_norm, mask=dec_mask)
        query = self.drop(query) + inputs

        query_norm = self.layer_norm_2(query)
        mid, attns = self.context_attn(memory_bank, memory_bank, query_norm, mask=src_pad_mask)
        output = self.feed_forward(self.drop(mid) + query)
        return output, attns


class TransformerDecoder(nn.Module):
    def __init__(self, num_layers, d_model, heads, d_ff, dropout, attention_dropout, embeddings=None):
        super().__init__()
        self.embeddings = embeddings
        self.transformer_layers = nn.ModuleList(
            [TransformerDecoderLayer(d_model, heads, d_ff, dropout, attention_dropout) for i in range(num_layers)])
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)

    def forward(self, output, memory_bank, src_pad_mask, tgt_pad_mask, future=True):
        for layer in self.transformer_layers:
            output, attn = layer(output, memory_bank, src_pad_mask, tgt_pad_mask, future=future)
        output = self.layer_norm(output)
        return output


class NMTModel(nn.Module):
    """build_base_model with -share_embeddings and -share_decoder_embeddings."""

    def __init__(self, vocab_size, d_model, heads, d_ff, enc_layers, dec_layers, padding_idx, max_len, dropout=0.1, attention_dropout=0.1):
        super().__init__()
        self.padding_idx = padding_idx
        src_emb = Embeddings(d_model, vocab_size, padding_idx, dropout, max_len)
        tgt_emb = Embeddings(d_model, vocab_size, padding_idx, dropout, max_len)
        tgt_emb.word_lut.weight = src_emb.word_lut.weight  # share_embeddings
        self.encoder = TransformerEncoder(enc_layers, d_model, heads, d_ff, dropout, attention_dropout, src_emb)
        self.decoder = TransformerDecoder(dec_layers, d_model, heads, d_ff, dropout, attention_dropout, tgt_emb)
        self.generator = nn.Linear(d_model, vocab_size, bias=False)
        self.generator.weight = self.decoder.embeddings.word_lut.weight  # share_decoder_embeddings

    def forward(self, src, tgt):
        """src [src_len, batch], tgt [tgt_len, batch] token ids (sequence first, as OpenNMT)."""
        src_emb = self.encoder.embeddings(src)
        src_pad_mask = src.transpose(0, 1).eq(self.padding_idx).unsqueeze(1)  # [B, 1, src_len]
        memory_bank = self.encoder(src_emb.transpose(0, 1).contiguous(), src_pad_mask)

        tgt_emb = self.decoder.embeddings(tgt)
        tgt_pad_mask = tgt.transpose(0, 1).eq(self.padding_idx).unsqueeze(1)  # [B, 1, tgt_len]
        dec_out = self.decoder(tgt_emb.transpose(0, 1).contiguous(), memory_bank, src_pad_mask, tgt_pad_mask)
        return self.generator(dec_out)


# ---- the adapter
from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def _t(a):
    return torch.as_tensor(a)


def pad_mask(key_padding, batch, length):
    """keep-mask [B, L] (True = token) -> OpenNMT's [B, 1, L] (True = pad)"""
    if key_padding is None:
        return torch.zeros(batch, 1, length, dtype=torch.bool)
    return ~_t(key_padding).bool().unsqueeze(1)


def with_future(mask, q_len, k_len, causal):
    if causal is None or not bool(causal):
        return mask
    return mask | torch.triu(torch.ones(q_len, k_len, dtype=torch.bool), 1).view(1, q_len, k_len)


def mha_forward(module, query, key, value, key_padding=None, causal=None):
    B, Lq, Lk = query.shape[0], query.shape[1], key.shape[1]
    mask = with_future(pad_mask(key_padding, B, Lk), Lq, Lk, causal)
    out, _ = module(key, value, query, mask=mask)
    return out


def encoder_layer_forward(module, x, key_padding=None, causal=None):
    B, L = x.shape[:2]
    return module(x, with_future(pad_mask(key_padding, B, L), L, L, causal))


def decoder_layer_forward(module, x, memory, key_padding=None, memory_key_padding=None, causal=None):
    B, T, S = x.shape[0], x.shape[1], memory.shape[1]
    future = causal is not None and bool(causal)
    out = module(x, memory, pad_mask(memory_key_padding, B, S), pad_mask(key_padding, B, T), future=future)
    return out[0] if isinstance(out, tuple) else out


def seq2seq_forward(module, src_ids, tgt_ids):
    logits = module(_t(src_ids).long().transpose(0, 1), _t(tgt_ids).long().transpose(0, 1))
    return logits


def mha_map(prefix, theirs):
    names = {"q": "linear_query", "k": "linear_keys", "v": "linear_values", "o": "final_linear"}
    return {f"{prefix}{c}.{p}": f"{theirs}{t}.{p}" for c, t in names.items() for p in ("weight", "bias")}


def _norms(prefix, theirs, names):
    return {f"{prefix}{c}.{p}": f"{theirs}{t}.{p}" for c, t in names.items() for p in ("weight", "bias")}


def enc_layer_map(prefix="", theirs=""):
    m = mha_map(f"{prefix}self_attn.", f"{theirs}self_attn.")
    return m | _norms(prefix, theirs, {"norm1": "layer_norm", "norm2": "feed_forward.layer_norm",
                                       "ffn.fc1": "feed_forward.w_1", "ffn.fc2": "feed_forward.w_2"})


def dec_layer_map(prefix="", theirs=""):
    m = mha_map(f"{prefix}self_attn.", f"{theirs}self_attn.") | mha_map(f"{prefix}cross_attn.", f"{theirs}context_attn.")
    return m | _norms(prefix, theirs, {"norm1": "layer_norm_1", "norm2": "layer_norm_2", "norm3": "feed_forward.layer_norm",
                                       "ffn.fc1": "feed_forward.w_1", "ffn.fc2": "feed_forward.w_2"})


def encoder_map(config, prefix="", theirs=""):
    m = {}
    for i in range(config.n_layers):
        m |= enc_layer_map(f"{prefix}layers.{i}.", f"{theirs}transformer.{i}.")
    return m | _norms(f"{prefix}", theirs, {"norm": "layer_norm"})


def decoder_map(config, prefix="", theirs=""):
    m = {}
    for i in range(config.n_decoder_layers):
        m |= dec_layer_map(f"{prefix}layers.{i}.", f"{theirs}transformer_layers.{i}.")
    return m | _norms(f"{prefix}", theirs, {"norm": "layer_norm"})


def seq2seq_map(config):
    m = {"embedding.weight": "encoder.embeddings.word_lut.weight"}
    return m | encoder_map(config, "encoder.", "encoder.") | decoder_map(config, "decoder.", "decoder.")


ONMT = Conventions(norm_placement="pre", eps=1e-6, pe_layout="interleaved", embedding_scale="emb", fully_masked_rows="uniform")
SPACE = ConfigSpace(split_heads=True, max_len=512)

adapter = TorchModuleAdapter("opennmt-seq2seq", [
    TorchEntry(
        "sinusoidal_pe",
        make=lambda config: PositionalEncoding(0.1, config.d_model, config.max_len),
        forward=lambda module, positions: module.pe[_t(positions).long(), 0, :],
        conventions=Conventions(pe_layout="interleaved"),
        supports=ConfigSpace(max_len=512),
    ),
    TorchEntry(
        "mha",
        make=lambda config: MultiHeadedAttention(config.n_heads, config.d_model, dropout=0.1),
        forward=mha_forward,
        param_map=mha_map("", ""),
        conventions=Conventions(fully_masked_rows="uniform"),
        supports=SPACE,
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: TransformerEncoderLayer(config.d_model, config.n_heads, config.d_ff, 0.1, 0.1),
        forward=encoder_layer_forward,
        param_map=enc_layer_map(),
        conventions=ONMT,
        supports=SPACE,
    ),
    TorchEntry(
        "decoder_layer",
        make=lambda config: TransformerDecoderLayer(config.d_model, config.n_heads, config.d_ff, 0.1, 0.1),
        forward=decoder_layer_forward,
        param_map=dec_layer_map(),
        conventions=ONMT,
        supports=SPACE,
    ),
    TorchEntry(
        "encoder",
        make=lambda config: TransformerEncoder(config.n_layers, config.d_model, config.n_heads, config.d_ff, 0.1, 0.1),
        forward=encoder_layer_forward,
        param_map=encoder_map,
        conventions=ONMT,
        supports=SPACE,
    ),
    TorchEntry(
        "decoder",
        make=lambda config: TransformerDecoder(config.n_decoder_layers, config.d_model, config.n_heads, config.d_ff, 0.1, 0.1),
        forward=decoder_layer_forward,
        param_map=decoder_map,
        conventions=ONMT,
        supports=SPACE,
    ),
    TorchEntry(
        "seq2seq",
        make=lambda config: NMTModel(config.vocab_size, config.d_model, config.n_heads, config.d_ff, config.n_layers,
                                     config.n_decoder_layers, config.padding_idx, config.max_len),
        forward=seq2seq_forward,
        param_map=seq2seq_map,
        conventions=ONMT,
        supports=ConfigSpace(split_heads=True, max_len=512, tied=True),
    ),
])
