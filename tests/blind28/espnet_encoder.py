# fmt: off
# ruff: noqa
"""ESPnet's Transformer encoder (espnet/nets/pytorch_backend/transformer/: attention.py,
positionwise_feed_forward.py, layer_norm.py, encoder_layer.py, repeat.py, encoder.py), written
the way ESPnet writes it: MultiHeadedAttention with forward_qkv/forward_attention,
PositionwiseFeedForward, its own LayerNorm (eps 1e-12), EncoderLayer with normalize_before and
concat_after, MultiSequential through repeat(), the encoder's after_norm. Written from memory
for the 28th blind set; input_layer=None with no positional encoding (the stack alone)."""
import math

import numpy
import torch
from torch import nn


class LayerNorm(torch.nn.LayerNorm):
    """Layer normalization module.

    Args:
        nout (int): Output dim size.
        dim (int): Dimension to be normalized.

    """

    def __init__(self, nout, dim=-1):
        """Construct an LayerNorm object."""
        super(LayerNorm, self).__init__(nout, eps=1e-12)
        self.dim = dim

    def forward(self, x):
        """Apply layer normalization.

        Args:
            x (torch.Tensor): Input tensor.

        Returns:
            torch.Tensor: Normalized tensor.

        """
        if self.dim == -1:
            return super(LayerNorm, self).forward(x)
        return (
            super(LayerNorm, self)
            .forward(x.transpose(self.dim, -1))
            .transpose(self.dim, -1)
        )


class MultiHeadedAttention(nn.Module):
    """Multi-Head Attention layer.

    Args:
        n_head (int): The number of heads.
        n_feat (int): The number of features.
        dropout_rate (float): Dropout rate.

    """

    def __init__(self, n_head, n_feat, dropout_rate):
        """Construct an MultiHeadedAttention object."""
        super(MultiHeadedAttention, self).__init__()
        assert n_feat % n_head == 0
        # We assume d_v always equals d_k
        self.d_k = n_feat // n_head
        self.h = n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)
        self.attn = None
        self.dropout = nn.Dropout(p=dropout_rate)

    def forward_qkv(self, query, key, value):
        """Transform query, key and value.

        Args:
            query (torch.Tensor): Query tensor (#batch, time1, size).
            key (torch.Tensor): Key tensor (#batch, time2, size).
            value (torch.Tensor): Value tensor (#batch, time2, size).

        Returns:
            torch.Tensor: Transformed query tensor (#batch, n_head, time1, d_k).
            torch.Tensor: Transformed key tensor (#batch, n_head, time2, d_k).
            torch.Tensor: Transformed value tensor (#batch, n_head, time2, d_k).

        """
        n_batch = query.size(0)
        q = self.linear_q(query).view(n_batch, -1, self.h, self.d_k)
        k = self.linear_k(key).view(n_batch, -1, self.h, self.d_k)
        v = self.linear_v(value).view(n_batch, -1, self.h, self.d_k)
        q = q.transpose(1, 2)  # (batch, head, time1, d_k)
        k = k.transpose(1, 2)  # (batch, head, time2, d_k)
        v = v.transpose(1, 2)  # (batch, head, time2, d_k)

        return q, k, v

    def forward_attention(self, value, scores, mask):
        """Compute attention context vector.

        Args:
            value (torch.Tensor): Transformed value (#batch, n_head, time2, d_k).
            scores (torch.Tensor): Attention score (#batch, n_head, time1, time2).
            mask (torch.Tensor): Mask (#batch, 1, time2) or (#batch, time1, time2).

        Returns:
            torch.Tensor: Transformed value (#batch, time1, d_model)
                weighted by the attention score (#batch, time1, time2).

        """
        n_batch = value.size(0)
        if mask is not None:
            mask = mask.unsqueeze(1).eq(0)  # (batch, 1, *, time2)
            min_value = torch.finfo(scores.dtype).min
            scores = scores.masked_fill(mask, min_value)
            self.attn = torch.softmax(scores, dim=-1).masked_fill(
                mask, 0.0
            )  # (batch, head, time1, time2)
        else:
            self.attn = torch.softmax(scores, dim=-1)  # (batch, head, time1, time2)

        p_attn = self.dropout(self.attn)
        x = torch.matmul(p_attn, value)  # (batch, head, time1, d_k)
        x = (
            x.transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k)
        )  # (batch, time1, d_model)

        return self.linear_out(x)  # (batch, time1, d_model)

    def forward(self, query, key, value, mask):
        """Compute scaled dot product attention.

        Args:
            query (torch.Tensor): Query tensor (#batch, time1, size).
            key (torch.Tensor): Key tensor (#batch, time2, size).
            value (torch.Tensor): Value tensor (#batch, time2, size).
            mask (torch.Tensor): Mask tensor (#batch, 1, time2) or
                (#batch, time1, time2).

        Returns:
            torch.Tensor: Output tensor (#batch, time1, d_model).

        """
        q, k, v = self.forward_qkv(query, key, value)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        return self.forward_attention(v, scores, mask)


class PositionwiseFeedForward(torch.nn.Module):
    """Positionwise feed forward layer.

    Args:
        idim (int): Input dimenstion.
        hidden_units (int): The number of hidden units.
        dropout_rate (float): Dropout rate.

    """

    def __init__(self, idim, hidden_units, dropout_rate, activation=torch.nn.ReLU()):
        """Construct an PositionwiseFeedForward object."""
        super(PositionwiseFeedForward, self).__init__()
        self.w_1 = torch.nn.Linear(idim, hidden_units)
        self.w_2 = torch.nn.Linear(hidden_units, idim)
        self.dropout = torch.nn.Dropout(dropout_rate)
        self.activation = activation

    def forward(self, x):
        """Forward function."""
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


class EncoderLayer(nn.Module):
    """Encoder layer module.

    Args:
        size (int): Input dimension.
        self_attn (torch.nn.Module): Self-attention module instance.
            `MultiHeadedAttention` or `RelPositionMultiHeadedAttention` instance
            can be used as the argument.
        feed_forward (torch.nn.Module): Feed-forward module instance.
            `PositionwiseFeedForward`, `MultiLayeredConv1d`, or `Conv1dLinear` instance
            can be used as the argument.
        dropout_rate (float): Dropout rate.
        normalize_before (bool): Whether to use layer_norm before the first block.
        concat_after (bool): Whether to concat attention layer's input and output.
            if True, additional linear will be applied.
            i.e. x -> x + linear(concat(x, att(x)))
            if False, no additional linear will be applied. i.e. x -> x + att(x)
        stochastic_depth_rate (float): Proability to skip this layer.
            During training, the layer may skip residual computation and return input
            as-is with given probability.
    """

    def __init__(
        self,
        size,
        self_attn,
        feed_forward,
        dropout_rate,
        normalize_before=True,
        concat_after=False,
        stochastic_depth_rate=0.0,
    ):
        """Construct an EncoderLayer object."""
        super(EncoderLayer, self).__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.norm1 = LayerNorm(size)
        self.norm2 = LayerNorm(size)
        self.dropout = nn.Dropout(dropout_rate)
        self.size = size
        self.normalize_before = normalize_before
        self.concat_after = concat_after
        if self.concat_after:
            self.concat_linear = nn.Linear(size + size, size)
        self.stochastic_depth_rate = stochastic_depth_rate

    def forward(self, x, mask, cache=None):
        """Compute encoded features.

        Args:
            x_input (torch.Tensor): Input tensor (#batch, time, size).
            mask (torch.Tensor): Mask tensor for the input (#batch, time).
            cache (torch.Tensor): Cache tensor of the input (#batch, time - 1, size).

        Returns:
            torch.Tensor: Output tensor (#batch, time, size).
            torch.Tensor: Mask tensor (#batch, time).

        """
        skip_layer = False
        # with stochastic depth, residual connection `x + f(x)` becomes
        # `x <- x + 1 / (1 - p) * f(x)` at training time.
        stoch_layer_coeff = 1.0
        if self.training and self.stochastic_depth_rate > 0:
            skip_layer = torch.rand(1).item() < self.stochastic_depth_rate
            stoch_layer_coeff = 1.0 / (1 - self.stochastic_depth_rate)

        if skip_layer:
            if cache is not None:
                x = torch.cat([cache, x], dim=1)
            return x, mask

        residual = x
        if self.normalize_before:
            x = self.norm1(x)

        if cache is None:
            x_q = x
        else:
            assert cache.shape == (x.shape[0], x.shape[1] - 1, self.size)
            x_q = x[:, -1:, :]
            residual = residual[:, -1:, :]
            mask = None if mask is None else mask[:, -1:, :]

        if self.concat_after:
            x_concat = torch.cat((x, self.self_attn(x_q, x, x, mask)), dim=-1)
            x = residual + stoch_layer_coeff * self.concat_linear(x_concat)
        else:
            x = residual + stoch_layer_coeff * self.dropout(
                self.self_attn(x_q, x, x, mask)
            )
        if not self.normalize_before:
            x = self.norm1(x)

        residual = x
        if self.normalize_before:
            x = self.norm2(x)
        x = residual + stoch_layer_coeff * self.dropout(self.feed_forward(x))
        if not self.normalize_before:
            x = self.norm2(x)

        if cache is not None:
            x = torch.cat([cache, x], dim=1)

        return x, mask


class MultiSequential(torch.nn.Sequential):
    """Multi-input multi-output torch.nn.Sequential."""

    def __init__(self, *args, layer_drop_rate=0.0):
        """Initialize MultiSequential with layer_drop.

        Args:
            layer_drop_rate (float): Probability of dropping out each fn (layer).

        """
        super(MultiSequential, self).__init__(*args)
        self.layer_drop_rate = layer_drop_rate

    def forward(self, *args):
        """Repeat."""
        _probs = torch.empty(len(self)).uniform_()
        for idx, m in enumerate(self):
            if not self.training or (_probs[idx] >= self.layer_drop_rate):
                args = m(*args)
        return args


def repeat(N, fn, layer_drop_rate=0.0):
    """Repeat module N times.

    Args:
        N (int): Number of repeat time.
        fn (Callable): Function to generate module.
        layer_drop_rate (float): Probability of dropping out each fn (layer).

    Returns:
        MultiSequential: Repeated model instance.

    """
    return MultiSequential(*[fn(n) for n in range(N)], layer_drop_rate=layer_drop_rate)


class Encoder(torch.nn.Module):
    """Transformer encoder module (input_layer=None: the layers and after_norm only).

    Args:
        idim (int): Input dimension.
        attention_dim (int): Dimension of attention.
        attention_heads (int): The number of heads of multi head attention.
        linear_units (int): The number of units of position-wise feed forward.
        num_blocks (int): The number of decoder blocks.
        dropout_rate (float): Dropout rate.
        attention_dropout_rate (float): Dropout rate in attention.
        normalize_before (bool): Whether to use layer_norm before the first block.
        concat_after (bool): Whether to concat attention layer's input and output.

    """

    def __init__(
        self,
        idim,
        attention_dim=256,
        attention_heads=4,
        linear_units=2048,
        num_blocks=6,
        dropout_rate=0.1,
        attention_dropout_rate=0.0,
        normalize_before=True,
        concat_after=False,
        stochastic_depth_rate=0.0,
        layer_drop_rate=0.0,
    ):
        """Construct an Encoder object."""
        super(Encoder, self).__init__()
        self.embed = None
        self.normalize_before = normalize_before
        positionwise_layer = PositionwiseFeedForward
        positionwise_layer_args = (attention_dim, linear_units, dropout_rate)
        self.encoders = repeat(
            num_blocks,
            lambda lnum: EncoderLayer(
                attention_dim,
                MultiHeadedAttention(
                    attention_heads, attention_dim, attention_dropout_rate
                ),
                positionwise_layer(*positionwise_layer_args),
                dropout_rate,
                normalize_before,
                concat_after,
                stochastic_depth_rate * float(1 + lnum) / num_blocks,
            ),
            layer_drop_rate,
        )
        if self.normalize_before:
            self.after_norm = LayerNorm(attention_dim)

    def forward(self, xs, masks):
        """Encode input sequence.

        Args:
            xs (torch.Tensor): Input tensor (#batch, time, idim).
            masks (torch.Tensor): Mask tensor (#batch, 1, time).

        Returns:
            torch.Tensor: Output tensor (#batch, time, attention_dim).
            torch.Tensor: Mask tensor (#batch, 1, time).

        """
        if self.embed is not None:
            xs, masks = self.embed(xs, masks)
        xs, masks = self.encoders(xs, masks)
        if self.normalize_before:
            xs = self.after_norm(xs)
        return xs, masks


# ---------------------------------------------------------------- adapter (glue, not ESPnet)
from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter  # noqa: E402
from tck.reference import Conventions  # noqa: E402


def _mask(x, key_padding=None, attn_mask=None, causal=None):
    """ESPnet's masks: (#batch, 1, time) from the lengths, (#batch, time, time) with subsequent_mask; 1 = attend."""
    B, L = x.shape[0], x.shape[1]
    if key_padding is None and attn_mask is None and not causal:
        return None
    mask = torch.ones(B, 1, L, dtype=torch.bool)
    if key_padding is not None:
        mask = torch.as_tensor(key_padding).bool().unsqueeze(-2)  # make_non_pad_mask(ilens).unsqueeze(-2)
    if attn_mask is not None or causal:
        full = mask.expand(B, L, L)
        if attn_mask is not None:
            m = torch.as_tensor(attn_mask).bool()
            full = full & (m if m.dim() == 3 else m.unsqueeze(0))
        if causal:
            full = full & torch.tril(torch.ones(L, L, dtype=torch.bool)).unsqueeze(0)  # subsequent_mask(L)
        mask = full
    return mask


def _mha_mask(query, key, key_padding=None, attn_mask=None, causal=None):
    B, Lq, Lk = query.shape[0], query.shape[1], key.shape[1]
    if key_padding is None and attn_mask is None and not causal:
        return None
    mask = torch.ones(B, Lq, Lk, dtype=torch.bool)
    if key_padding is not None:
        mask = mask & torch.as_tensor(key_padding).bool().unsqueeze(-2)
    if attn_mask is not None:
        m = torch.as_tensor(attn_mask).bool()
        mask = mask & (m if m.dim() == 3 else m.unsqueeze(0))
    if causal:
        mask = mask & torch.ones(Lq, Lk, dtype=torch.bool).tril().unsqueeze(0)
    return mask


def _layer_map(ours, theirs):
    names = {"self_attn.q": "self_attn.linear_q", "self_attn.k": "self_attn.linear_k", "self_attn.v": "self_attn.linear_v",
             "self_attn.o": "self_attn.linear_out", "ffn.fc1": "feed_forward.w_1", "ffn.fc2": "feed_forward.w_2",
             "norm1": "norm1", "norm2": "norm2"}
    return {f"{ours}{k}.{p}": f"{theirs}{v}.{p}" for k, v in names.items() for p in ("weight", "bias")}


def _encoder_map(config):
    m = {}
    for i in range(config.n_layers):
        m |= _layer_map(f"layers.{i}.", f"encoders.{i}.")
    return m | {"norm.weight": "after_norm.weight", "norm.bias": "after_norm.bias"}


CONVENTIONS = Conventions(norm_placement="pre", eps=1e-12)

adapter = TorchModuleAdapter("espnet-transformer-encoder", [
    TorchEntry("layer_norm", make=lambda config: LayerNorm(config.d_model), forward=lambda m, x: m(x),
               conventions=Conventions(eps=1e-12)),
    TorchEntry("ffn", make=lambda config: PositionwiseFeedForward(config.d_model, config.d_ff, 0.1),
               forward=lambda m, x: m(x), param_map={f"{k}.{p}": f"{v}.{p}" for k, v in (("fc1", "w_1"), ("fc2", "w_2")) for p in ("weight", "bias")}),
    TorchEntry("mha", make=lambda config: MultiHeadedAttention(config.n_heads, config.d_model, 0.1),
               forward=lambda m, query, key, value, key_padding=None, attn_mask=None, causal=None: m(query, key, value, _mha_mask(query, key, key_padding, attn_mask, causal)),
               param_map={f"{k}.{p}": f"linear_{'out' if k == 'o' else k}.{p}" for k in "qkvo" for p in ("weight", "bias")},
               supports=ConfigSpace(split_heads=True)),
    TorchEntry("encoder_layer",
               make=lambda config: EncoderLayer(config.d_model, MultiHeadedAttention(config.n_heads, config.d_model, 0.1),
                                                PositionwiseFeedForward(config.d_model, config.d_ff, 0.1), 0.1, True, False),
               forward=lambda m, x, key_padding=None, attn_mask=None, causal=None: m(x, _mask(x, key_padding, attn_mask, causal))[0],
               param_map=_layer_map("", ""), conventions=CONVENTIONS, supports=ConfigSpace(split_heads=True)),
    TorchEntry("encoder",
               make=lambda config: Encoder(config.d_model, config.d_model, config.n_heads, config.d_ff, config.n_layers, 0.1, 0.1, True, False),
               forward=lambda m, x, key_padding=None, attn_mask=None, causal=None: m(x, _mask(x, key_padding, attn_mask, causal))[0],
               param_map=_encoder_map, conventions=CONVENTIONS, supports=ConfigSpace(split_heads=True)),
])
