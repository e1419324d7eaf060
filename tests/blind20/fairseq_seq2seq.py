# fmt: off
# ruff: noqa
"""The encoder-decoder of fairseq's TransformerModel (fairseq/models/transformer/), written for
the twentieth blind benchmark: SinusoidalPositionalEmbedding (sines then cosines, positions
counted from padding_idx + 1 by make_positions), embed_scale = sqrt(embed_dim), post-LN layers
(normalize_before=False), MultiheadAttention on Time x Batch x Channel tensors with separate
q/k/v projections and q *= self.scaling, the decoder's buffered_future_mask, the
encoder_padding_mask (True = pad), share_all_embeddings and a ReLU FFN."""
import math

import torch
import torch.nn.functional as F
from torch import nn


def fill_with_neg_inf(t):
    """FP16-compatible function that fills a tensor with -inf."""
    return t.float().fill_(float("-inf")).type_as(t)


def index_positions(tensor, padding_idx):
    """Every token numbered by its index (pads included, as the spec's PE[0 .. L-1]), in
    make_positions' numbering: the first token reads row padding_idx + 1."""
    return torch.arange(tensor.size(1), device=tensor.device).expand_as(tensor) + padding_idx + 1


def make_positions(tensor, padding_idx):
    """Replace non-padding symbols with their position numbers: numbers begin at padding_idx + 1."""
    mask = tensor.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


def softmax(x, dim):
    # fairseq.utils.softmax: F.softmax(x.float()); float64 kept as float64 here
    return F.softmax(x, dim=dim, dtype=torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype)


class SinusoidalPositionalEmbedding(nn.Module):
    """This module produces sinusoidal positional embeddings of any length. Padding symbols are ignored."""

    def __init__(self, embedding_dim, padding_idx, init_size=1024):
        super().__init__()
        self.embedding_dim = embedding_dim
        self.padding_idx = padding_idx if padding_idx is not None else 0
        self.register_buffer("_float_tensor", torch.FloatTensor(1))
        self.weights = SinusoidalPositionalEmbedding.get_embedding(init_size, embedding_dim, padding_idx)

    @staticmethod
    def get_embedding(num_embeddings, embedding_dim, padding_idx=None):
        """Build sinusoidal embeddings: sines in the first half, cosines in the second."""
        half_dim = embedding_dim // 2
        emb = math.log(10000) / half_dim
        emb = torch.exp(torch.arange(half_dim, dtype=torch.float64) * -emb)
        first = (padding_idx if padding_idx is not None else -1) + 1
        emb = (torch.arange(num_embeddings, dtype=torch.float64) - first).unsqueeze(1) * emb.unsqueeze(0)
        emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(num_embeddings, -1)
        if embedding_dim % 2 == 1:
            # zero pad
            emb = torch.cat([emb, torch.zeros(num_embeddings, 1, dtype=emb.dtype)], dim=1)
        if padding_idx is not None:
            emb[padding_idx, :] = 0
        return emb

    def forward(self, input, positions=None):
        """Input is expected to be of size [bsz x seqlen]."""
        bsz, seq_len = input.shape
        max_pos = self.padding_idx + 1 + seq_len
        if max_pos > self.weights.size(0):
            # recompute/expand embeddings if needed
            self.weights = SinusoidalPositionalEmbedding.get_embedding(max_pos, self.embedding_dim, self.padding_idx)
        self.weights = self.weights.to(self._float_tensor)
        if positions is None:
            positions = make_positions(input, self.padding_idx)
        return self.weights.index_select(0, positions.view(-1)).view(bsz, seq_len, -1).detach()


class MultiheadAttention(nn.Module):
    """Multi-headed attention. See "Attention Is All You Need" for more details."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, self_attention=False, encoder_decoder_attention=False):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.dropout_module = nn.Dropout(dropout)
        self.head_dim = embed_dim // num_heads
        assert self.head_dim * num_heads == self.embed_dim, "embed_dim must be divisible by num_heads"
        self.scaling = self.head_dim**-0.5
        self.self_attention = self_attention
        self.encoder_decoder_attention = encoder_decoder_attention
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None):
        """Input shape: Time x Batch x Channel"""
        tgt_len, bsz, embed_dim = query.size()
        src_len = key.size(0)
        q = self.q_proj(query)
        k = self.k_proj(key)
        v = self.v_proj(value)
        q *= self.scaling
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))
        assert list(attn_weights.size()) == [bsz * self.num_heads, tgt_len, src_len]
        if attn_mask is not None:
            attn_mask = attn_mask.unsqueeze(0)
            attn_weights += attn_mask
        if key_padding_mask is not None:
            # don't attend to padding symbols
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2).to(torch.bool), float("-inf"))
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_weights_float = softmax(attn_weights, dim=-1)
        attn_weights = attn_weights_float.type_as(attn_weights)
        attn_probs = self.dropout_module(attn_weights)
        attn = torch.bmm(attn_probs, v)
        assert list(attn.size()) == [bsz * self.num_heads, tgt_len, self.head_dim]
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        attn = self.out_proj(attn)
        return attn, None


class TransformerEncoderLayer(nn.Module):
    def __init__(self, embed_dim, heads, ffn_dim, dropout=0.1, normalize_before=False):
        super().__init__()
        self.embed_dim = embed_dim
        self.self_attn = MultiheadAttention(embed_dim, heads, dropout=dropout, self_attention=True)
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.dropout_module = nn.Dropout(dropout)
        self.activation_fn = F.relu
        self.activation_dropout_module = nn.Dropout(0.0)
        self.normalize_before = normalize_before
        self.fc1 = nn.Linear(embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, embed_dim)
        self.final_layer_norm = nn.LayerNorm(embed_dim)

    def residual_connection(self, x, residual):
        return residual + x

    def forward(self, x, encoder_padding_mask, attn_mask=None):
        if attn_mask is not None:
            attn_mask = attn_mask.masked_fill(attn_mask.to(torch.bool), -1e8 if x.dtype in (torch.float32, torch.float64) else -1e4)
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(query=x, key=x, value=x, key_padding_mask=encoder_padding_mask, attn_mask=attn_mask)
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_fn(self.fc1(x))
        x = self.activation_dropout_module(x)
        x = self.fc2(x)
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x


class TransformerDecoderLayer(nn.Module):
    def __init__(self, embed_dim, heads, ffn_dim, dropout=0.1, normalize_before=False):
        super().__init__()
        self.embed_dim = embed_dim
        self.dropout_module = nn.Dropout(dropout)
        self.self_attn = MultiheadAttention(embed_dim, heads, dropout=dropout, self_attention=True)
        self.activation_fn = F.relu
        self.activation_dropout_module = nn.Dropout(0.0)
        self.normalize_before = normalize_before
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.encoder_attn = MultiheadAttention(embed_dim, heads, dropout=dropout, encoder_decoder_attention=True)
        self.encoder_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, embed_dim)
        self.final_layer_norm = nn.LayerNorm(embed_dim)

    def residual_connection(self, x, residual):
        return residual + x

    def forward(self, x, encoder_out=None, encoder_padding_mask=None, self_attn_mask=None, self_attn_padding_mask=None):
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(query=x, key=x, value=x, key_padding_mask=self_attn_padding_mask, attn_mask=self_attn_mask)
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        residual = x
        if self.normalize_before:
            x = self.encoder_attn_layer_norm(x)
        x, _ = self.encoder_attn(query=x, key=encoder_out, value=encoder_out, key_padding_mask=encoder_padding_mask)
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.encoder_attn_layer_norm(x)
        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_fn(self.fc1(x))
        x = self.activation_dropout_module(x)
        x = self.fc2(x)
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x


def buffered_future_mask(tensor):
    dim = tensor.size(0)
    return torch.triu(fill_with_neg_inf(torch.zeros([dim, dim])), 1).to(tensor)


class TransformerEncoder(nn.Module):
    def __init__(self, embed_tokens, embed_dim, heads, ffn_dim, layers, padding_idx, max_source_positions, dropout=0.1):
        super().__init__()
        self.dropout_module = nn.Dropout(dropout)
        self.padding_idx = padding_idx
        self.embed_tokens = embed_tokens
        self.embed_scale = math.sqrt(embed_dim)
        self.embed_positions = SinusoidalPositionalEmbedding(embed_dim, padding_idx, init_size=max_source_positions + padding_idx + 1)
        self.layers = nn.ModuleList([TransformerEncoderLayer(embed_dim, heads, ffn_dim, dropout) for _ in range(layers)])
        self.layer_norm = None  # encoder_normalize_before=False

    def forward_layers(self, x, encoder_padding_mask, attn_mask=None):
        # B x T x C -> T x B x C
        x = x.transpose(0, 1)
        for layer in self.layers:
            x = layer(x, encoder_padding_mask=encoder_padding_mask if encoder_padding_mask is not None and encoder_padding_mask.any() else None, attn_mask=attn_mask)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return x.transpose(0, 1)

    def forward(self, src_tokens):
        encoder_padding_mask = src_tokens.eq(self.padding_idx)
        x = embed = self.embed_scale * self.embed_tokens(src_tokens)
        x = embed + self.embed_positions(src_tokens, positions=index_positions(src_tokens, self.padding_idx))
        x = self.dropout_module(x)
        # account for padding while computing the representation
        x = x * (1 - encoder_padding_mask.unsqueeze(-1).type_as(x))
        return self.forward_layers(x, encoder_padding_mask), encoder_padding_mask


class TransformerDecoder(nn.Module):
    def __init__(self, embed_tokens, embed_dim, heads, ffn_dim, layers, padding_idx, max_target_positions, dropout=0.1):
        super().__init__()
        self.dropout_module = nn.Dropout(dropout)
        self.padding_idx = padding_idx
        self.embed_tokens = embed_tokens
        self.embed_scale = math.sqrt(embed_dim)
        self.embed_positions = SinusoidalPositionalEmbedding(embed_dim, padding_idx, init_size=max_target_positions + padding_idx + 1)
        self.layers = nn.ModuleList([TransformerDecoderLayer(embed_dim, heads, ffn_dim, dropout) for _ in range(layers)])
        self.layer_norm = None  # decoder_normalize_before=False
        self.output_projection = nn.Linear(embed_dim, embed_tokens.num_embeddings, bias=False)
        self.output_projection.weight = self.embed_tokens.weight  # share_decoder_input_output_embed

    def forward_layers(self, x, encoder_out, encoder_padding_mask, self_attn_padding_mask=None, causal=True):
        # B x T x C -> T x B x C
        x = x.transpose(0, 1)
        self_attn_mask = buffered_future_mask(x) if causal else None
        for layer in self.layers:
            x = layer(x, encoder_out, encoder_padding_mask, self_attn_mask=self_attn_mask, self_attn_padding_mask=self_attn_padding_mask)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return x.transpose(0, 1)

    def forward(self, prev_output_tokens, encoder_out, encoder_padding_mask):
        self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx) if prev_output_tokens.eq(self.padding_idx).any() else None
        x = self.embed_scale * self.embed_tokens(prev_output_tokens)
        x += self.embed_positions(prev_output_tokens, positions=index_positions(prev_output_tokens, self.padding_idx))
        x = self.dropout_module(x)
        x = self.forward_layers(x, encoder_out, encoder_padding_mask, self_attn_padding_mask)
        return self.output_projection(x)


def Embedding(num_embeddings, embedding_dim, padding_idx):
    m = nn.Embedding(num_embeddings, embedding_dim, padding_idx=padding_idx)
    nn.init.normal_(m.weight, mean=0, std=embedding_dim**-0.5)
    nn.init.constant_(m.weight[padding_idx], 0)
    return m


class TransformerModel(nn.Module):
    def __init__(self, vocab_size, embed_dim, heads, ffn_dim, encoder_layers, decoder_layers, padding_idx, max_positions):
        super().__init__()
        self.max_positions = max_positions
        shared = Embedding(vocab_size, embed_dim, padding_idx)  # share_all_embeddings
        self.encoder = TransformerEncoder(shared, embed_dim, heads, ffn_dim, encoder_layers, padding_idx, max_positions)
        self.decoder = TransformerDecoder(shared, embed_dim, heads, ffn_dim, decoder_layers, padding_idx, max_positions)

    def forward(self, src_tokens, prev_output_tokens):
        if max(src_tokens.size(1), prev_output_tokens.size(1)) > self.max_positions:
            raise ValueError(f"sequence longer than max_positions={self.max_positions}")
        encoder_out, encoder_padding_mask = self.encoder(src_tokens)
        encoder_padding_mask = encoder_padding_mask if encoder_padding_mask.any() else None
        return self.decoder(prev_output_tokens, encoder_out.transpose(0, 1), encoder_padding_mask)


# ---- the adapter
from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def pad_mask(keep):
    return None if keep is None else ~keep  # tck keep-mask (True = token) -> fairseq (True = pad)


def future_mask(n, like):
    return torch.triu(torch.ones(n, n, dtype=like.dtype, device=like.device), 1)  # 1 = masked


def seq_first(t):
    return t.transpose(0, 1)


def pe_forward(module, positions):
    return module.weights.to(module._float_tensor).index_select(0, (positions + module.padding_idx + 1).reshape(-1)).view(*positions.shape, -1)


def mha_forward(module, query, key, value, key_padding=None, causal=None):
    attn_mask = None
    if causal is not None and bool(causal):
        attn_mask = torch.triu(fill_with_neg_inf(torch.zeros(query.shape[1], key.shape[1])), 1).to(query)
    out, _ = module(seq_first(query), seq_first(key), seq_first(value), key_padding_mask=pad_mask(key_padding), attn_mask=attn_mask)
    return seq_first(out)


def encoder_layer_forward(module, x, key_padding=None, causal=None):
    attn_mask = future_mask(x.shape[1], x) if causal is not None and bool(causal) else None
    return seq_first(module(seq_first(x), pad_mask(key_padding), attn_mask=attn_mask))


def decoder_layer_forward(module, x, memory, key_padding=None, memory_key_padding=None, causal=None):
    self_attn_mask = buffered_future_mask(seq_first(x)) if causal is not None and bool(causal) else None
    out = module(seq_first(x), seq_first(memory), pad_mask(memory_key_padding), self_attn_mask=self_attn_mask, self_attn_padding_mask=pad_mask(key_padding))
    return seq_first(out)


class EncoderStack(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList([TransformerEncoderLayer(config.d_model, config.n_heads, config.d_ff) for _ in range(config.n_layers)])
        self.layer_norm = None

    forward_layers = TransformerEncoder.forward_layers


class DecoderStack(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList([TransformerDecoderLayer(config.d_model, config.n_heads, config.d_ff) for _ in range(config.n_decoder_layers)])
        self.layer_norm = None

    forward_layers = TransformerDecoder.forward_layers


def encoder_forward(module, x, key_padding=None, causal=None):
    attn_mask = future_mask(x.shape[1], x) if causal is not None and bool(causal) else None
    return module.forward_layers(x, pad_mask(key_padding), attn_mask=attn_mask)


def decoder_forward(module, x, memory, key_padding=None, memory_key_padding=None, causal=None):
    return module.forward_layers(x, seq_first(memory), pad_mask(memory_key_padding), pad_mask(key_padding), causal=causal is not None and bool(causal))


ATTN = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}
WB = ("weight", "bias")


def attn_map(prefix, ours):
    return {f"{prefix}{c}.{p}": f"{ours}{o}.{p}" for c, o in ATTN.items() for p in WB}


def enc_layer_map(prefix="", ours=""):
    out = attn_map(f"{prefix}self_attn.", f"{ours}self_attn.")
    names = {"norm1": "self_attn_layer_norm", "norm2": "final_layer_norm", "ffn.fc1": "fc1", "ffn.fc2": "fc2"}
    return out | {f"{prefix}{c}.{p}": f"{ours}{o}.{p}" for c, o in names.items() for p in WB}


def dec_layer_map(prefix="", ours=""):
    out = attn_map(f"{prefix}self_attn.", f"{ours}self_attn.") | attn_map(f"{prefix}cross_attn.", f"{ours}encoder_attn.")
    names = {"norm1": "self_attn_layer_norm", "norm2": "encoder_attn_layer_norm", "norm3": "final_layer_norm", "ffn.fc1": "fc1", "ffn.fc2": "fc2"}
    return out | {f"{prefix}{c}.{p}": f"{ours}{o}.{p}" for c, o in names.items() for p in WB}


def encoder_map(config, prefix="", ours=""):
    out = {}
    for i in range(config.n_layers):
        out |= enc_layer_map(f"{prefix}layers.{i}.", f"{ours}layers.{i}.")
    return out


def decoder_map(config, prefix="", ours=""):
    out = {}
    for i in range(config.n_decoder_layers):
        out |= dec_layer_map(f"{prefix}layers.{i}.", f"{ours}layers.{i}.")
    return out


def seq2seq_map(config):
    out = {"embedding.weight": "encoder.embed_tokens.weight"}
    return out | encoder_map(config, "encoder.", "encoder.") | decoder_map(config, "decoder.", "decoder.")


FAIRSEQ = Conventions(pe_layout="concatenated")
FAIRSEQ_NAN = Conventions(pe_layout="concatenated", fully_masked_rows="nan")
FAIRSEQ_ENC = Conventions(pe_layout="concatenated", fully_masked_rows="undefined")
SPLIT = ConfigSpace(split_heads=True)

adapter = TorchModuleAdapter("blind20-fairseq-seq2seq", [
    TorchEntry(
        "sinusoidal_pe",
        make=lambda config: SinusoidalPositionalEmbedding(config.d_model, config.padding_idx, init_size=config.max_len + config.padding_idx + 1),
        forward=pe_forward,
        conventions=FAIRSEQ,
        supports=ConfigSpace(max_len=512),
    ),
    TorchEntry("mha", make=lambda config: MultiheadAttention(config.d_model, config.n_heads), forward=mha_forward, param_map=attn_map("", ""), conventions=FAIRSEQ_NAN, supports=SPLIT),
    TorchEntry("encoder_layer", make=lambda config: TransformerEncoderLayer(config.d_model, config.n_heads, config.d_ff), forward=encoder_layer_forward, param_map=enc_layer_map(), conventions=FAIRSEQ_ENC, supports=SPLIT),
    TorchEntry("decoder_layer", make=lambda config: TransformerDecoderLayer(config.d_model, config.n_heads, config.d_ff), forward=decoder_layer_forward, param_map=dec_layer_map(), conventions=FAIRSEQ_NAN, supports=SPLIT),
    TorchEntry("encoder", make=EncoderStack, forward=encoder_forward, param_map=encoder_map, conventions=FAIRSEQ_ENC, supports=SPLIT),
    TorchEntry("decoder", make=DecoderStack, forward=decoder_forward, param_map=decoder_map, conventions=FAIRSEQ_NAN, supports=SPLIT),
    TorchEntry(
        "seq2seq",
        make=lambda config: TransformerModel(config.vocab_size, config.d_model, config.n_heads, config.d_ff, config.n_layers, config.n_decoder_layers, config.padding_idx, config.max_len),
        forward=lambda m, src_ids, tgt_ids: m(src_ids, tgt_ids),
        param_map=seq2seq_map,
        conventions=FAIRSEQ,
        supports=ConfigSpace(split_heads=True, max_len=512, tied=True),
    ),
])
