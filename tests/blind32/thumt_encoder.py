# fmt: off
# ruff: noqa
# The Transformer encoder of THUMT (Tsinghua's NMT toolkit, PyTorch branch) as
# thumt/models/transformer.py and thumt/modules/{module,affine,layer_norm,attention,feed_forward}.py
# write it: name-scoped modules, `Affine` layers, the `AttentionSubLayer` / `FFNSubLayer` pair with
# `normalization` "after" (post-LN, the transformer_base default) or "before", additive attention
# biases of -1e9 built by `masking_bias` / `causal_bias`, heads split by reshape and transpose.
import math
import contextlib

import torch
import torch.nn as nn


# ---- thumt/utils/scope.py

_NAME_STACK = []


@contextlib.contextmanager
def scope(name):
    _NAME_STACK.append(name)
    try:
        yield name
    finally:
        _NAME_STACK.pop()


def get_scope():
    return "/".join(_NAME_STACK)


class HParams(object):
    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)


def default_params():
    params = HParams(
        hidden_size=512,
        filter_size=2048,
        num_heads=8,
        num_encoder_layers=6,
        num_decoder_layers=6,
        attention_dropout=0.0,
        residual_dropout=0.1,
        relu_dropout=0.0,
        label_smoothing=0.1,
        normalization="after",
        shared_embedding_and_softmax_weights=False,
        shared_source_target_embedding=False,
    )
    return params


# ---- thumt/modules/module.py

class Module(nn.Module):

    def __init__(self, name=""):
        super(Module, self).__init__()
        scope = get_scope()
        self._name = scope + "/" + name if scope else name

    def add_name(self, tensor, name):
        tensor.tensor_name = get_scope() + "/" + name

    @property
    def name(self):
        return self._name


# ---- thumt/modules/affine.py

class Affine(Module):

    def __init__(self, in_features, out_features, bias=True, name="affine"):
        super(Affine, self).__init__(name=name)
        self.in_features = in_features
        self.out_features = out_features

        with scope(name):
            self.weight = nn.Parameter(torch.Tensor(out_features, in_features))
            self.add_name(self.weight, "weight")
            if bias:
                self.bias = nn.Parameter(torch.Tensor(out_features))
                self.add_name(self.bias, "bias")
            else:
                self.register_parameter('bias', None)

        self.reset_parameters()

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in)
            nn.init.uniform_(self.bias, -bound, bound)

    def orthogonal_initialize(self, gain=1.0):
        nn.init.orthogonal_(self.weight, gain)
        nn.init.zeros_(self.bias)

    def forward(self, input):
        return nn.functional.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return 'in_features={}, out_features={}, bias={}'.format(
            self.in_features, self.out_features, self.bias is not None
        )


# ---- thumt/modules/layer_norm.py

class LayerNorm(Module):

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True,
                 name="layer_norm"):
        super(LayerNorm, self).__init__(name=name)
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine

        with scope(name):
            if self.elementwise_affine:
                self.weight = nn.Parameter(torch.Tensor(*normalized_shape))
                self.bias = nn.Parameter(torch.Tensor(*normalized_shape))
                self.add_name(self.weight, "weight")
                self.add_name(self.bias, "bias")
            else:
                self.register_parameter('weight', None)
                self.register_parameter('bias', None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.elementwise_affine:
            nn.init.ones_(self.weight)
            nn.init.zeros_(self.bias)

    def forward(self, input):
        return nn.functional.layer_norm(
            input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return '{normalized_shape}, eps={eps}, ' \
            'elementwise_affine={elementwise_affine}'.format(**self.__dict__)


# ---- thumt/modules/attention.py

class Attention(Module):

    def __init__(self, q_size, k_size, hidden_size, name="attention"):
        super(Attention, self).__init__(name)


class MultiHeadAttentionBase(Module):

    def __init__(self, name="multihead_attention_base"):
        super(MultiHeadAttentionBase, self).__init__(name=name)

    @staticmethod
    def split_heads(x, heads):
        batch = x.shape[0]
        length = x.shape[1]
        channels = x.shape[2]

        y = torch.reshape(x, [batch, length, heads, channels // heads])
        return torch.transpose(y, 2, 1)

    @staticmethod
    def combine_heads(x):
        batch = x.shape[0]
        heads = x.shape[1]
        length = x.shape[2]
        channels = x.shape[3]

        y = torch.transpose(x, 2, 1)

        return torch.reshape(y, [batch, length, heads * channels])


class MultiHeadAttention(MultiHeadAttentionBase):

    def __init__(self, hidden_size, num_heads, dropout=0.0,
                 name="multihead_attention"):
        super(MultiHeadAttention, self).__init__(name=name)

        self.num_heads = num_heads
        self.hidden_size = hidden_size
        self.dropout = dropout

        with scope(name):
            self.q_transform = Affine(hidden_size, hidden_size,
                                      name="q_transform")
            self.k_transform = Affine(hidden_size, hidden_size,
                                      name="k_transform")
            self.v_transform = Affine(hidden_size, hidden_size,
                                      name="v_transform")
            self.o_transform = Affine(hidden_size, hidden_size,
                                      name="o_transform")

        self.reset_parameters()

    def forward(self, query, bias, memory=None, kv=None):
        q = self.q_transform(query)

        if memory is not None:
            if kv is not None:
                k, v = kv
            else:
                k, v = None, None

            # encoder-decoder attention
            k = k or self.k_transform(memory)
            v = v or self.v_transform(memory)
        else:
            # self-attention
            k = self.k_transform(query)
            v = self.v_transform(query)

            if kv is not None:
                k = torch.cat([kv[0], k], dim=1)
                v = torch.cat([kv[1], v], dim=1)

        # split heads
        qh = self.split_heads(q, self.num_heads)
        kh = self.split_heads(k, self.num_heads)
        vh = self.split_heads(v, self.num_heads)

        # scale query
        qh = qh * (self.hidden_size // self.num_heads) ** -0.5

        # dot-product attention
        kh = torch.transpose(kh, -2, -1)
        logits = torch.matmul(qh, kh)

        if bias is not None:
            logits = logits + bias

        weights = torch.nn.functional.dropout(torch.softmax(logits, dim=-1),
                                              p=self.dropout,
                                              training=self.training)

        x = torch.matmul(weights, vh)

        # combine heads
        output = self.o_transform(self.combine_heads(x))

        if kv is not None:
            return output, k, v

        return output

    def reset_parameters(self, initializer="uniform_scaling", **kwargs):
        if initializer == "uniform_scaling":
            # 6 / (4 * hidden_size) -> 6 / (2 * hidden_size)
            nn.init.xavier_uniform_(self.q_transform.weight, 2 ** -0.5)
            nn.init.xavier_uniform_(self.k_transform.weight, 2 ** -0.5)
            nn.init.xavier_uniform_(self.v_transform.weight, 2 ** -0.5)
            nn.init.xavier_uniform_(self.o_transform.weight)
            nn.init.constant_(self.q_transform.bias, 0.0)
            nn.init.constant_(self.k_transform.bias, 0.0)
            nn.init.constant_(self.v_transform.bias, 0.0)
            nn.init.constant_(self.o_transform.bias, 0.0)
        else:
            raise ValueError("Unknown initializer %d" % initializer)


# ---- thumt/modules/feed_forward.py

class FeedForward(Module):

    def __init__(self, input_size, hidden_size, output_size=None, dropout=0.0,
                 name="feed_forward"):
        super(FeedForward, self).__init__(name=name)

        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = output_size or input_size
        self.dropout = dropout

        with scope(name):
            self.input_transform = Affine(input_size, hidden_size,
                                          name="input_transform")
            self.output_transform = Affine(hidden_size, self.output_size,
                                           name="output_transform")

        self.reset_parameters()

    def forward(self, x):
        h = nn.functional.relu(self.input_transform(x))
        h = nn.functional.dropout(h, self.dropout, self.training)
        return self.output_transform(h)

    def reset_parameters(self):
        nn.init.xavier_uniform_(self.input_transform.weight)
        nn.init.xavier_uniform_(self.output_transform.weight)
        nn.init.constant_(self.input_transform.bias, 0.0)
        nn.init.constant_(self.output_transform.bias, 0.0)


# ---- thumt/models/transformer.py

class AttentionSubLayer(Module):

    def __init__(self, params, name="attention"):
        super(AttentionSubLayer, self).__init__(name=name)

        self.dropout = params.residual_dropout
        self.normalization = params.normalization

        with scope(name):
            self.attention = MultiHeadAttention(
                params.hidden_size, params.num_heads, params.attention_dropout)
            self.layer_norm = LayerNorm(params.hidden_size)

    def forward(self, x, bias, memory=None, state=None):
        if self.normalization == "before":
            y = self.layer_norm(x)
        else:
            y = x

        if self.training or state is None:
            y = self.attention(y, bias, memory, None)
        else:
            kv = [state["k"], state["v"]]
            y, k, v = self.attention(y, bias, memory, kv)
            state["k"], state["v"] = k, v

        y = nn.functional.dropout(y, self.dropout, self.training)

        if self.normalization == "before":
            return x + y
        else:
            return self.layer_norm(x + y)


class FFNSubLayer(Module):

    def __init__(self, params, dtype=None, name="ffn_layer"):
        super(FFNSubLayer, self).__init__(name=name)

        self.dropout = params.residual_dropout
        self.normalization = params.normalization

        with scope(name):
            self.ffn_layer = FeedForward(params.hidden_size,
                                         params.filter_size,
                                         dropout=params.relu_dropout)
            self.layer_norm = LayerNorm(params.hidden_size)

    def forward(self, x):
        if self.normalization == "before":
            y = self.layer_norm(x)
        else:
            y = x  # the FFN reads x itself

        y = self.ffn_layer(y)
        y = nn.functional.dropout(y, self.dropout, self.training)

        if self.normalization == "before":
            return x + y  # pre-norm: residual only
        else:
            return self.layer_norm(x + y)  # post-norm: residual, then norm


class TransformerEncoderLayer(Module):

    def __init__(self, params, name="layer"):
        super(TransformerEncoderLayer, self).__init__(name=name)

        with scope(name):
            self.self_attention = AttentionSubLayer(params)
            self.feed_forward = FFNSubLayer(params)

    def forward(self, x, bias):
        x = self.self_attention(x, bias)
        x = self.feed_forward(x)
        return x


class TransformerEncoder(Module):

    def __init__(self, params, name="encoder"):
        super(TransformerEncoder, self).__init__(name=name)

        self.normalization = params.normalization

        with scope(name):
            self.layers = nn.ModuleList([
                TransformerEncoderLayer(params, name="layer_%d" % i)
                for i in range(params.num_encoder_layers)])
            if self.normalization == "before":
                self.layer_norm = LayerNorm(params.hidden_size)
            else:
                self.layer_norm = None

    def forward(self, x, bias):
        for layer in self.layers:
            x = layer(x, bias)

        if self.normalization == "before":
            x = self.layer_norm(x)

        return x


class Transformer(Module):
    """The parts of thumt.models.transformer.Transformer that build the encoder's biases."""

    @staticmethod
    def masking_bias(mask, inf=-1e9):
        ret = (1.0 - mask) * inf
        return torch.unsqueeze(torch.unsqueeze(ret, 1), 1)

    @staticmethod
    def causal_bias(length, inf=-1e9):
        ret = torch.ones([length, length]) * inf
        ret = torch.triu(ret, diagonal=1)
        return torch.reshape(ret, [1, 1, length, length])


# ---- the adapter (glue: Transformer.encode's bias for the kit's keep-masks)
from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def _params(config):
    params = default_params()
    params.hidden_size = config.d_model
    params.filter_size = config.d_ff
    params.num_heads = config.n_heads
    params.num_encoder_layers = config.n_layers
    params.attention_dropout = 0.1
    params.relu_dropout = 0.1
    return params


def _bias(x, key_padding=None, attn_mask=None, causal=None):
    B, L = x.shape[0], x.shape[1]
    src_mask = key_padding.to(x.dtype) if key_padding is not None else torch.ones(B, L, dtype=x.dtype)
    enc_attn_bias = Transformer.masking_bias(src_mask).to(x.dtype)
    if attn_mask is not None:
        enc_attn_bias = enc_attn_bias + Transformer.masking_bias(attn_mask.to(x.dtype))[:, 0]
    if causal is not None and bool(causal):
        enc_attn_bias = enc_attn_bias + Transformer.causal_bias(L).to(x.dtype)
    return enc_attn_bias


def _layer_params(prefix):
    names = {
        "self_attn.q": "self_attention.attention.q_transform",
        "self_attn.k": "self_attention.attention.k_transform",
        "self_attn.v": "self_attention.attention.v_transform",
        "self_attn.o": "self_attention.attention.o_transform",
        "norm1": "self_attention.layer_norm",
        "ffn.fc1": "feed_forward.ffn_layer.input_transform",
        "ffn.fc2": "feed_forward.ffn_layer.output_transform",
        "norm2": "feed_forward.layer_norm",
    }
    return {f"{c}.{p}": f"{prefix}{y}.{p}" for c, y in names.items() for p in ("weight", "bias")}


def _encoder_params(config):
    out = {}
    for i in range(config.n_layers):
        out |= {f"layers.{i}.{k}": v for k, v in _layer_params(f"layers.{i}.").items()}
    return out


_CONVENTIONS = Conventions(norm_placement="post", activation="relu", eps=1e-5, fully_masked_rows="undefined")

adapter = TorchModuleAdapter("thumt-encoder", [
    TorchEntry(
        "encoder_layer",
        make=lambda config: TransformerEncoderLayer(_params(config)),
        forward=lambda m, x, key_padding=None, attn_mask=None, causal=None: m(x, _bias(x, key_padding, attn_mask, causal)),
        param_map=_layer_params(""),
        conventions=_CONVENTIONS,
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "encoder",
        make=lambda config: TransformerEncoder(_params(config)),
        forward=lambda m, x, key_padding=None, attn_mask=None, causal=None: m(x, _bias(x, key_padding, attn_mask, causal)),
        param_map=_encoder_params,
        conventions=_CONVENTIONS,
        supports=ConfigSpace(split_heads=True),
    ),
])
