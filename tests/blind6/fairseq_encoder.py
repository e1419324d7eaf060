# fmt: off
# ruff: noqa
"""A Transformer encoder as fairseq (0.x) writes it: time-first tensors [T, B, C] throughout,
a ``MultiheadAttention`` with one packed ``in_proj_weight`` / ``in_proj_bias`` sliced by
``_in_proj(start, end)``, queries multiplied by ``scaling`` before the product, heads folded
into the batch ([B * H, T, d]) for ``torch.bmm``, ``key_padding_mask`` with True = pad filled
with -inf, an additive float ``attn_mask`` (``buffered_future_mask``), the softmax in float32
for 16-bit inputs (``utils.softmax``), ``maybe_layer_norm`` with ``normalize_before`` toggled
per layer (``encoder_normalize_before``), a final ``layer_norm`` only for a pre-norm encoder,
ReLU, dropout layers that are the identity in eval.

Written for the sixth blind benchmark (tests/blind6); correct as written.
"""
import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn


def utils_softmax(x, dim):
    if x.dtype in (torch.float16, torch.bfloat16):
        return F.softmax(x.float(), dim=dim)
    return F.softmax(x, dim=dim)


def fill_with_neg_inf(t):
    return t.float().fill_(float("-inf")).type_as(t)


def LayerNorm(normalized_shape, eps=1e-5):
    return nn.LayerNorm(normalized_shape, eps=eps)


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.head_dim = embed_dim // num_heads
        assert self.head_dim * num_heads == self.embed_dim, "embed_dim must be divisible by num_heads"
        self.scaling = self.head_dim ** -0.5
        self.in_proj_weight = nn.Parameter(torch.Tensor(3 * embed_dim, embed_dim))
        self.in_proj_bias = nn.Parameter(torch.Tensor(3 * embed_dim))
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.constant_(self.in_proj_bias, 0.0)
        nn.init.constant_(self.out_proj.bias, 0.0)

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None):
        """query, key, value: Time x Batch x Channel. key_padding_mask: B x src_len, True = pad."""
        tgt_len, bsz, embed_dim = query.size()
        q = self.in_proj_q(query)
        k = self.in_proj_k(key)
        v = self.in_proj_v(value)
        q = q * self.scaling

        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        src_len = k.size(1)

        attn_weights = torch.bmm(q, k.transpose(1, 2))
        assert list(attn_weights.size()) == [bsz * self.num_heads, tgt_len, src_len]

        if attn_mask is not None:
            attn_weights += attn_mask.unsqueeze(0)

        if key_padding_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2), float("-inf"))
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)

        attn_weights = utils_softmax(attn_weights, dim=-1).type_as(attn_weights)
        attn_weights = F.dropout(attn_weights, p=self.dropout, training=self.training)

        attn = torch.bmm(attn_weights, v)
        assert list(attn.size()) == [bsz * self.num_heads, tgt_len, self.head_dim]
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        attn = self.out_proj(attn)
        return attn, None

    def in_proj_q(self, query):
        return self._in_proj(query, end=self.embed_dim)

    def in_proj_k(self, key):
        return self._in_proj(key, start=self.embed_dim, end=2 * self.embed_dim)

    def in_proj_v(self, value):
        return self._in_proj(value, start=2 * self.embed_dim)

    def _in_proj(self, input, start=0, end=None):
        weight = self.in_proj_weight[start:end, :]
        bias = self.in_proj_bias[start:end]
        return F.linear(input, weight, bias)


class TransformerEncoderLayer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.embed_dim = args.encoder_embed_dim
        self.self_attn = MultiheadAttention(self.embed_dim, args.encoder_attention_heads, dropout=args.attention_dropout)
        self.dropout = args.dropout
        self.relu_dropout = args.relu_dropout
        self.normalize_before = args.encoder_normalize_before
        self.fc1 = nn.Linear(self.embed_dim, args.encoder_ffn_embed_dim)
        self.fc2 = nn.Linear(args.encoder_ffn_embed_dim, self.embed_dim)
        self.self_attn_layer_norm = LayerNorm(self.embed_dim)
        self.final_layer_norm = LayerNorm(self.embed_dim)

    def forward(self, x, encoder_padding_mask, attn_mask=None):
        """x: (seq_len, batch, embed_dim); encoder_padding_mask: (batch, src_len), 1 = pad."""
        residual = x
        x = self.maybe_layer_norm(self.self_attn_layer_norm, x, before=True)
        x, _ = self.self_attn(query=x, key=x, value=x, key_padding_mask=encoder_padding_mask, attn_mask=attn_mask)
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = residual + x
        x = self.maybe_layer_norm(self.self_attn_layer_norm, x, after=True)

        residual = x
        x = self.maybe_layer_norm(self.final_layer_norm, x, before=True)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, p=self.relu_dropout, training=self.training)
        x = self.fc2(x)
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = residual + x
        x = self.maybe_layer_norm(self.final_layer_norm, x, after=True)
        return x

    def maybe_layer_norm(self, layer_norm, x, before=False, after=False):
        assert before ^ after
        if after ^ self.normalize_before:
            return layer_norm(x)
        else:
            return x


class TransformerEncoder(nn.Module):
    """The layers and the final norm of fairseq's TransformerEncoder (the embeddings left out:
    this takes the embedded, time-first x)."""

    def __init__(self, args):
        super().__init__()
        self.layers = nn.ModuleList([])
        self.layers.extend([TransformerEncoderLayer(args) for i in range(args.encoder_layers)])
        self.normalize = args.encoder_normalize_before
        if self.normalize:
            self.layer_norm = LayerNorm(args.encoder_embed_dim)

    def forward(self, x, encoder_padding_mask=None, attn_mask=None):
        if encoder_padding_mask is not None and not encoder_padding_mask.any():
            encoder_padding_mask = None
        for layer in self.layers:
            x = layer(x, encoder_padding_mask, attn_mask)
        if self.normalize:
            x = self.layer_norm(x)
        return x


def buffered_future_mask(tensor):
    dim = tensor.size(0)
    return torch.triu(fill_with_neg_inf(tensor.new(dim, dim)), 1)


# ---- the adapter: batch-first numpy at the boundary, time-first inside
from tck.adapters import Chunk, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def _args(config, normalize_before):
    return SimpleNamespace(
        encoder_embed_dim=config.d_model, encoder_attention_heads=config.n_heads,
        encoder_ffn_embed_dim=config.d_ff, encoder_layers=config.n_layers,
        encoder_normalize_before=normalize_before,
        dropout=0.1, attention_dropout=0.1, relu_dropout=0.1,
    )


def _mha_forward(m, query, key, value, key_padding=None, causal=None):
    q, k, v = (t.transpose(0, 1) for t in (query, key, value))
    pad = None if key_padding is None else ~key_padding.bool()
    mask = torch.triu(fill_with_neg_inf(q.new(q.size(0), k.size(0))), 1) if causal is not None and bool(causal) else None
    out, _ = m(q, k, v, key_padding_mask=pad, attn_mask=mask)
    return out.transpose(0, 1)


def _forward(m, x, key_padding=None, causal=None):
    x = x.transpose(0, 1)  # B x T x C -> T x B x C
    pad = None if key_padding is None else ~key_padding.bool()
    mask = buffered_future_mask(x) if causal is not None and bool(causal) else None
    return m(x, pad, mask).transpose(0, 1)


def _attn_map(prefix):
    out = {f"{prefix}{n}.weight": Chunk(f"{prefix}in_proj_weight", i, 3) for i, n in enumerate("qkv")}
    out |= {f"{prefix}{n}.bias": Chunk(f"{prefix}in_proj_bias", i, 3) for i, n in enumerate("qkv")}
    out |= {f"{prefix}o.{p}": f"{prefix}out_proj.{p}" for p in ("weight", "bias")}
    return out


def _layer_map(prefix):
    out = _attn_map(f"{prefix}self_attn.")
    for canon, mine in (("norm1", "self_attn_layer_norm"), ("norm2", "final_layer_norm"), ("ffn.fc1", "fc1"), ("ffn.fc2", "fc2")):
        out |= {f"{prefix}{canon}.{p}": f"{prefix}{mine}.{p}" for p in ("weight", "bias")}
    return out


def _encoder_map(config):
    out = {}
    for i in range(config.n_layers):
        out |= _layer_map(f"layers.{i}.")
    out |= {f"norm.{p}": f"layer_norm.{p}" for p in ("weight", "bias")}
    return out


POST = Conventions(norm_placement="post", activation="relu", fully_masked_rows="nan")
PRE = Conventions(norm_placement="pre", activation="relu", fully_masked_rows="nan")

adapter = TorchModuleAdapter("fairseq-encoder", [
    TorchEntry("mha", make=lambda config: MultiheadAttention(config.d_model, config.n_heads, dropout=0.1), forward=_mha_forward, param_map=_attn_map(""), conventions=POST),
    TorchEntry("encoder_layer", make=lambda config: TransformerEncoderLayer(_args(config, False)), forward=_forward, param_map=_layer_map(""), conventions=POST),
    TorchEntry("encoder", make=lambda config: TransformerEncoder(_args(config, True)), forward=_forward, param_map=_encoder_map, conventions=PRE),
])
