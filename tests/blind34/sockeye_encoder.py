# fmt: off
# ruff: noqa
"""Sockeye 3's (PyTorch) Transformer encoder as sockeye/transformer.py, sockeye/layers.py and
sockeye/encoder.py write it: time-major data, TransformerProcessBlock's "n"/"dr" sequences,
MultiHeadSelfAttention's one ff_in projection split into queries and key/value states,
DotAttentionCell with the interleaved_matmul helpers and a (batch * heads, 1, len) mask."""
import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch as pt
import torch.nn.functional as F


# ---------------------------------------------------------------- constants.py
class C:
    LARGE_POSITIVE_VALUE = 99999999.
    LARGE_NEGATIVE_VALUE = -LARGE_POSITIVE_VALUE
    LARGE_VALUES = {
        # Something at the middle of 32768<x<65519. Will be rounded to a multiple of 32.
        # https://en.wikipedia.org/wiki/Half-precision_floating-point_format#Precision_limitations_on_integer_values
        pt.float16: 49152.0,
        pt.bfloat16: 1.0e18,
        pt.float32: LARGE_POSITIVE_VALUE,
        pt.float64: LARGE_POSITIVE_VALUE,
    }
    NO_POSITIONAL_EMBEDDING = "none"
    FIXED_POSITIONAL_EMBEDDING = "fixed"
    RELU = "relu"
    GELU = "gelu"
    SWISH1 = "swish1"


@dataclass
class TransformerConfig:
    model_size: int
    attention_heads: int
    feed_forward_num_hidden: int
    act_type: str
    num_layers: int
    dropout_attention: float
    dropout_act: float
    dropout_prepost: float
    positional_embedding_type: str
    preprocess_sequence: str
    postprocess_sequence: str
    max_seq_len_source: int
    max_seq_len_target: int
    decoder_type: str = "transformer"
    use_lhuc: bool = False
    depth_key_value: int = 0
    use_glu: bool = False


# ---------------------------------------------------------------- layers.py
def get_activation(act_type: str, inplace: bool = False) -> pt.nn.Module:
    if act_type == C.SWISH1:
        return pt.nn.SiLU(inplace=inplace)
    if act_type == C.GELU:
        return pt.nn.GELU()
    return pt.nn.ReLU(inplace=inplace)


def interleaved_matmul_encdec_qk(q: pt.Tensor, kv: pt.Tensor, heads: int) -> pt.Tensor:
    """
    Simple port of npx.interleaved_matmul_encdec_qk with PyTorch.

    :param q: (qlen, batch, hidden)
    :param kv: (kvlen, batch, hidden * 2) -- all keys, then all values
    :param heads: number of attention heads
    :return: (batch * heads, qlen, klen)
    """
    qlen, batch, hidden = q.size()
    head_dim = hidden // heads

    # batch * heads, qlen, head_dim)
    q = q.contiguous().view(qlen, batch * heads, head_dim).transpose(0, 1)
    q = q * head_dim ** -0.5

    tmp = kv.reshape(-1, batch, 2, heads, head_dim)
    k = tmp[:, :, 0, :, :]  # pick keys
    k = k.permute(1, 2, 3, 0)  # bsz, heads, head_dim, kvlen
    k = k.reshape(batch * heads, head_dim, -1)  # bsz*heads, head_dim, kvlen

    return pt.bmm(q, k)  # bsz*heads, qlen, klen


def interleaved_matmul_encdec_valatt(kv: pt.Tensor, att: pt.Tensor, heads: int) -> pt.Tensor:
    """
    Simple port of npx.interleaved_matmul_encdec_valatt with PyTorch.
    There is probably something to be gained by using views more
    efficiently but this is placeholder code anyway.

    :param kv: (kvlen, batch, hidden * 2)
    :param att: (batch * heads, qlen, kvlen)
    :param heads: number of attention heads
    :return: (qlen, batch, hidden)
    """
    kvlen, batch, hidden2 = kv.size()
    hidden = hidden2 // 2
    head_dim = hidden // heads

    tmp = kv.reshape(kvlen, batch, 2, heads, -1)
    v = tmp[:, :, 1, :, :]  # pick values
    v = v.permute(1, 2, 0, 3)  # bsz, heads, kvlen, head_dim
    v = v.reshape(-1, kvlen, head_dim)  # bsz*heads, kvlen, head_dim

    output = pt.bmm(att, v)  # bsz*heads, qlen, head_dim
    output = output.transpose(0, 1).contiguous().view(-1, batch, hidden)
    return output


class DotAttentionCell(pt.nn.Module):

    def __init__(self, dropout: float = 0.0, heads: int = 1) -> None:
        super().__init__()
        self.dropout = pt.nn.Dropout(p=dropout) if dropout > 0.0 else None
        self.heads = heads

    def forward(self, queries: pt.Tensor, key_values: pt.Tensor, mask: Optional[pt.Tensor] = None):
        """
        :param queries: Query tensor of shape (query_length, batch_size, query_depth)
        :param key_values: Interleaved Key & value tensor of shape (key/value_length, batch_size, key_depth * 2)
        :param mask: Optional boolean tensor for attention masking of shape (batch * heads, <qlen>, <kvlen>).
                     If this is cross-attention, <qlen> dimension can be 1 for broadcasting,
                     i.e. (batch * heads, 1, kvlen). For self-attention on the decoder side an autoregressive mask
                     should be provided of shape (1, len, len) or (len, len).
                     Value of this mask is True for positions that should be masked out (padding positions),
                     False for valid positions.
        """
        # (batch * heads, qlen, klen)
        logits = interleaved_matmul_encdec_qk(queries, key_values, heads=self.heads)

        if mask is not None:
            logits = logits.masked_fill(mask, -C.LARGE_VALUES[logits.dtype])

        probs = F.softmax(logits, dim=-1)

        probs = self.dropout(probs) if self.dropout is not None else probs

        # key_values: (lk, n, dv * 2)
        # probs: (n*h, lq, lk)
        # result: (n, lq, dv)
        return interleaved_matmul_encdec_valatt(key_values, probs, heads=self.heads)


def prepare_source_length_mask(lengths: pt.Tensor, heads: int, max_length: int, expand: bool = True) -> pt.Tensor:
    """
    Prepare source length masks where positions of invalid tokens are marked as True.

    :param lengths: Total source length. Shape: (batch_size,).
    :param heads: Number of attention heads.
    :param max_length: Maximum sequence length.
    :param expand: Expand to the heads.
    :return: Source length mask.
    """
    # (batch_size, max_len)
    mask = ~(pt.arange(max_length, device=lengths.device).unsqueeze(0) < lengths.reshape((-1, 1)))
    if expand:
        # (batch_size * heads, 1, max_len)
        mask = mask.unsqueeze(1).expand(-1, heads, -1).reshape((-1, max_length)).unsqueeze(1)
    return mask


def expand_source_mask(single_head_att_mask: pt.Tensor, heads: int, max_len: int) -> pt.Tensor:
    # Shape: (batch, max_len) -> (batch * heads, 1, max_len)
    att_mask = single_head_att_mask.unsqueeze(1).expand(-1, heads, -1).reshape((-1, max_len)).unsqueeze(1)
    return att_mask


class AutoRegressiveMask(pt.nn.Module):

    def forward(self, x: pt.Tensor) -> pt.Tensor:
        """ Input tensor with length on dimension 1 """
        mask = pt.full((x.shape[1], x.shape[1]), fill_value=1, device=x.device, dtype=pt.bool)
        mask = pt.triu(mask, diagonal=1)
        return mask.detach()  # Shape: (len, len)


class MultiHeadAttentionBase(pt.nn.Module):
    """
    Base class for Multi-head attention.

    :param depth_att: Attention depth / number of hidden units.
    :param heads: Number of attention heads.
    :param depth_out: Output depth / number of output units.
    :param dropout: Dropout probability on attention scores
    """
    def __init__(self, depth_att: int = 512, heads: int = 8, depth_out: int = 512, dropout: float = 0.0, dtype=None) -> None:
        super().__init__()
        assert depth_att % heads == 0, "Number of heads (%d) must divide attention depth (%d)" % (heads, depth_att)
        self.depth = depth_att
        self.heads = heads
        self.depth_out = depth_out
        self.depth_per_head = self.depth // self.heads

        self.dot_att = DotAttentionCell(dropout=dropout, heads=heads)
        self.ff_out = pt.nn.Linear(in_features=depth_att, out_features=depth_out, bias=False, dtype=dtype)

    def _attend(self, queries: pt.Tensor, key_values: pt.Tensor, mask: Optional[pt.Tensor] = None) -> pt.Tensor:
        """
        Returns context vectors of multi-head dot attention.

        :param queries: Query tensor. Shape: (query_length, batch_size, depth).
        :param key_values: Keys/Values. Shape: (keys_values_length, batch_size, depth * 2).
        :param mask: Optional attention mask. Shape: (batch * heads, query_length, keys_values_length)
        :return: Context vectors. Shape: (batch_size, query_max_length, output_depth).
        """
        # (query_max_length, batch, depth)
        contexts = self.dot_att(queries=queries, key_values=key_values, mask=mask)

        # (query_max_length, batch, output_depth)
        contexts = self.ff_out(contexts)

        return contexts


class MultiHeadSelfAttention(MultiHeadAttentionBase):
    """
    Multi-head self-attention. Independent linear projections of inputs serve as
    queries, keys, and values for the attention.
    """
    def __init__(self, depth_att: int = 512, heads: int = 8, depth_out: int = 512, dropout: float = 0.0, dtype=None) -> None:
        super().__init__(depth_att, heads, depth_out, dropout, dtype)

        self.depth_att = depth_att
        self.ff_in = pt.nn.Linear(in_features=depth_out, out_features=depth_att * 3, bias=False, dtype=dtype)

    def forward(self, inputs: pt.Tensor, previous_states: Optional[pt.Tensor] = None, mask: Optional[pt.Tensor] = None, **args) -> Tuple[pt.Tensor, pt.Tensor]:  # mypy: ignore
        """
        Computes multi-head attention on a set of inputs, serving as queries, keys, and values.
        If sequence lengths are provided, they will be used to mask the attention scores.
        A bias mask may also be used to mask the attention scores.
        May also use a cache of previously computed inputs.
        Returns a tensor of shape (max_length, batch, output_depth).

        :param inputs: Input Data. Shape: (length, batch, input_depth).
        :param previous_states: Optional list with two tensors - previous input's keys and values.
                                Shape: 2 * (batch, max_length+1, depth_att).
        :param mask: Optional attention mask. Shape: (batch * heads, 1, max_length).
        :return: tensor of shape (max_length, batch, output_depth).
        """
        proj = self.ff_in(inputs)  # Shape: (length, batch, 3 * depth_att)
        queries, states = proj.split((self.depth_att, 2 * self.depth_att), dim=2)

        if previous_states is not None:
            states = pt.cat((previous_states, states), dim=0)

        return self._attend(queries=queries, key_values=states, mask=mask), states


# ---------------------------------------------------------------- transformer.py
class TransformerProcessBlock(pt.nn.Module):
    """
    Block to perform pre/post processing on layer inputs.
    The processing steps are determined by the sequence argument, which can contain one of the three operations:
    n: layer normalization
    r: residual connection
    d: dropout
    """

    def __init__(self, sequence: str, dropout: float, num_hidden: int = 0, dtype=None) -> None:
        super().__init__()
        self.sequence = sequence
        self.dropout = dropout
        self.layer_norm = None  # type: Optional[pt.nn.LayerNorm]
        if 'n' in sequence:
            # do not use Apex's FusedLayerNorm because of
            # https://github.com/huggingface/transformers/issues/9377
            self.layer_norm = pt.nn.LayerNorm(num_hidden, eps=1e-06, dtype=dtype)

    def forward(self, data: pt.Tensor, prev: Optional[pt.Tensor] = None) -> pt.Tensor:
        """
        Apply processing sequence to data with optional previous input.

        :param data: Input data. Shape: (batch, length, num_hidden).
        :param prev: Previous data. Shape: (batch, length, num_hidden).
        :return: Processed data. Shape: (batch, length, num_hidden).
        """
        if not self.sequence:
            return data

        if prev is None:
            assert 'r' not in self.sequence, "Residual connection not allowed if no previous value given."

        for step in self.sequence:

            if step == "r":
                data = data + prev

            elif step == "n":
                data = self.layer_norm(data)

            elif step == "d":
                if self.dropout > 0.0:
                    data = F.dropout(data, p=self.dropout, training=self.training)
            else:
                raise ValueError("Unknown step in sequence: %s" % step)

        return data


class TransformerFeedForward(pt.nn.Module):

    def __init__(self, num_hidden: int, num_model: int, act_type: str, dropout: float, use_glu: bool = False, inference_only: bool = False, dtype=None) -> None:
        super().__init__()
        self.dropout = dropout
        self.use_glu = use_glu
        self.ff1 = pt.nn.Linear(in_features=num_model, out_features=num_hidden, dtype=dtype)
        self.act = get_activation(act_type, inplace=inference_only)
        if self.use_glu:
            self.linear = pt.nn.Linear(in_features=num_model, out_features=num_hidden, dtype=dtype)
        if self.dropout > 0.0:
            self.drop = pt.nn.Dropout(p=self.dropout, inplace=inference_only)
        self.ff2 = pt.nn.Linear(in_features=num_hidden, out_features=num_model, dtype=dtype)

    def forward(self, x):
        h = self.ff1(x)
        h = self.act(h)
        if self.use_glu:
            h = h * self.linear(x)
        if self.dropout > 0.0:
            h = self.drop(h)
        y = self.ff2(h)
        return y


class TransformerEncoderBlock(pt.nn.Module):
    """
    A transformer encoder block consists self-attention and a feed-forward layer with pre/post process blocks
    in between.
    """

    def __init__(self, config: TransformerConfig, inference_only: bool = False, dtype=None) -> None:
        super().__init__()

        self.pre_self_attention = TransformerProcessBlock(sequence=config.preprocess_sequence, dropout=config.dropout_prepost, num_hidden=config.model_size, dtype=dtype)
        self.self_attention = MultiHeadSelfAttention(depth_att=config.model_size, heads=config.attention_heads, depth_out=config.model_size, dropout=config.dropout_attention, dtype=dtype)
        self.post_self_attention = TransformerProcessBlock(sequence=config.postprocess_sequence, dropout=config.dropout_prepost, num_hidden=config.model_size, dtype=dtype)

        self.pre_ff = TransformerProcessBlock(sequence=config.preprocess_sequence, dropout=config.dropout_prepost, num_hidden=config.model_size, dtype=dtype)
        self.ff = TransformerFeedForward(num_hidden=config.feed_forward_num_hidden, num_model=config.model_size, act_type=config.act_type, dropout=config.dropout_act, use_glu=config.use_glu, inference_only=inference_only, dtype=dtype)
        self.post_ff = TransformerProcessBlock(sequence=config.postprocess_sequence, dropout=config.dropout_prepost, num_hidden=config.model_size, dtype=dtype)
        self.lhuc = None

    def forward(self, data: pt.Tensor, att_mask: pt.Tensor = None) -> pt.Tensor:
        """
        :param data: Input tensor of shape (length, batch_size, hidden)
        :param att_mask: Optional data length mask of shape (batch_size * self.heads, 1, length)
                         to mask self-attention scores. True for padding positions.
        """
        # self-attention
        data_self_att, _ = self.self_attention(inputs=self.pre_self_attention(data), previous_states=None, mask=att_mask, bias=None)
        data = self.post_self_attention(data_self_att, data)

        # feed-forward
        data_ff = self.ff(self.pre_ff(data))
        data = self.post_ff(data_ff, data)

        if self.lhuc:
            data = self.lhuc(data)

        return data


# ---------------------------------------------------------------- encoder.py
class TransformerEncoder(pt.nn.Module):
    """
    Non-recurrent encoder based on the transformer architecture in:

    Attention Is All You Need, Figure 1 (left)
    Vaswani et al. (https://arxiv.org/pdf/1706.03762.pdf).

    :param config: Configuration for transformer encoder.
    """

    def __init__(self, config: TransformerConfig, inference_only: bool = False, dtype=None) -> None:
        super().__init__()
        self.config = config

        self.dropout = pt.nn.Dropout(p=config.dropout_prepost) if config.dropout_prepost > 0.0 else None

        # sinusoidal positions are added by the embedding in this port (the kit's encoder starts at the first layer)
        self.pos_embedding = None if config.positional_embedding_type == C.NO_POSITIONAL_EMBEDDING else NotImplemented

        self.layers = pt.nn.ModuleList(  # using ModuleList because we have additional inputs
            TransformerEncoderBlock(config, inference_only=inference_only, dtype=dtype)
            for _ in range(config.num_layers))

        self.final_process = TransformerProcessBlock(sequence=config.preprocess_sequence, dropout=config.dropout_prepost, num_hidden=self.config.model_size, dtype=dtype)

    def forward(self, data: pt.Tensor, valid_length: pt.Tensor, source_mask: Optional[pt.Tensor] = None, autoregr_mask: Optional[pt.Tensor] = None) -> Tuple[pt.Tensor, pt.Tensor, pt.Tensor]:
        # positional embedding
        if self.pos_embedding is not None:
            data = self.pos_embedding(data)

        if self.dropout is not None:
            data = self.dropout(data)

        _, max_len, __ = data.size()
        if source_mask is None:
            # length_mask: (batch_size, max_len)
            single_head_att_mask = prepare_source_length_mask(valid_length, self.config.attention_heads, max_length=max_len, expand=False)
        else:
            # not in Sockeye: any padding pattern, True for padding positions (batch_size, max_len)
            single_head_att_mask = source_mask
        # Shape: (batch, max_len) -> (batch * heads, 1, max_len)
        att_mask = expand_source_mask(single_head_att_mask, self.config.attention_heads, max_len)
        if autoregr_mask is not None:
            att_mask = att_mask | autoregr_mask.unsqueeze(0)

        data = data.transpose(1, 0)  # batch to time major
        for layer in self.layers:
            data = layer(data, att_mask=att_mask)

        data = self.final_process(data)
        data = data.transpose(1, 0)  # time to batch major
        return data, valid_length, single_head_att_mask


# ---------------------------------------------------------------- the kit's adapter (not Sockeye's)
from tck.adapters import TorchEntry, TorchModuleAdapter, ConfigSpace, Param
from tck.reference import Conventions


def _config(config) -> TransformerConfig:
    return TransformerConfig(
        model_size=config.d_model,
        attention_heads=config.n_heads,
        feed_forward_num_hidden=config.d_ff,
        act_type=C.RELU,
        num_layers=config.n_layers,
        dropout_attention=0.1,
        dropout_act=0.1,
        dropout_prepost=0.1,
        positional_embedding_type=C.NO_POSITIONAL_EMBEDDING,
        preprocess_sequence="n",
        postprocess_sequence="dr",
        max_seq_len_source=config.max_len,
        max_seq_len_target=config.max_len,
    )


def _masks(x, key_padding, causal):
    source_mask = None if key_padding is None else ~key_padding.to(pt.bool)
    autoregr_mask = AutoRegressiveMask()(x) if causal is not None and bool(causal) else None
    return source_mask, autoregr_mask


def _encoder_forward(encoder, x, key_padding=None, causal=None):
    B, L, _ = x.shape
    source_mask, autoregr_mask = _masks(x, key_padding, causal)
    valid_length = pt.full((B,), L, dtype=pt.int64, device=x.device)
    return encoder(x, valid_length, source_mask=source_mask, autoregr_mask=autoregr_mask)[0]


def _layer_forward(layer, x, key_padding=None, causal=None):
    B, L, _ = x.shape
    heads = layer.self_attention.heads
    source_mask, autoregr_mask = _masks(x, key_padding, causal)
    if source_mask is None:
        source_mask = pt.zeros(B, L, dtype=pt.bool, device=x.device)
    mask = expand_source_mask(source_mask, heads, L)
    if autoregr_mask is not None:
        mask = pt.logical_or(mask, autoregr_mask[None])
    return layer(x.transpose(1, 0), att_mask=mask).transpose(1, 0)


def _layer_map(canon, mine, config):
    D = config.d_model
    return {
        f"{canon}self_attn.q.weight": Param(f"{mine}self_attention.ff_in.weight", slice=(0, 0, D)),
        f"{canon}self_attn.k.weight": Param(f"{mine}self_attention.ff_in.weight", slice=(0, D, 2 * D)),
        f"{canon}self_attn.v.weight": Param(f"{mine}self_attention.ff_in.weight", slice=(0, 2 * D, 3 * D)),
        f"{canon}self_attn.o.weight": f"{mine}self_attention.ff_out.weight",
        f"{canon}norm1.weight": f"{mine}pre_self_attention.layer_norm.weight",
        f"{canon}norm1.bias": f"{mine}pre_self_attention.layer_norm.bias",
        f"{canon}norm2.weight": f"{mine}pre_ff.layer_norm.weight",
        f"{canon}norm2.bias": f"{mine}pre_ff.layer_norm.bias",
        f"{canon}ffn.fc1.weight": f"{mine}ff.ff1.weight",
        f"{canon}ffn.fc1.bias": f"{mine}ff.ff1.bias",
        f"{canon}ffn.fc2.weight": f"{mine}ff.ff2.weight",
        f"{canon}ffn.fc2.bias": f"{mine}ff.ff2.bias",
    }


def _encoder_map(config):
    m = {"norm.weight": "final_process.layer_norm.weight", "norm.bias": "final_process.layer_norm.bias"}
    for i in range(config.n_layers):
        m |= _layer_map(f"layers.{i}.", f"layers.{i}.", config)
    return m


CONVENTIONS = Conventions(norm_placement="pre", activation="relu", eps=1e-6, fully_masked_rows="uniform")
BIASES = {"attention_bias": False, "ffn_bias": True}
SPACE = ConfigSpace(split_heads=True, biases={"attention": False, "ffn": True})

adapter = TorchModuleAdapter("sockeye-encoder", [
    TorchEntry("encoder_layer", make=lambda c: TransformerEncoderBlock(_config(c)), forward=_layer_forward, param_map=lambda c: _layer_map("", "", c), conventions=CONVENTIONS, config=BIASES, supports=SPACE),
    TorchEntry("encoder", make=lambda c: TransformerEncoder(_config(c)), forward=_encoder_forward, param_map=_encoder_map, conventions=CONVENTIONS, config=BIASES, supports=SPACE),
])
