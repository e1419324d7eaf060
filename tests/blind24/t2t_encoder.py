# fmt: off
# ruff: noqa
"""The encoder of tensor2tensor (`models/transformer.py`, `layers/common_attention.py`,
`layers/common_layers.py`) written in torch: `layer_preprocess` / `layer_postprocess` sequences
("n" before, "da" after: pre-LN), `attention_bias_ignore_padding` (a -1e9 bias on the pads),
`multihead_attention` with `split_heads` / `combine_heads`, bias-free q, k, v and output
transforms and `q *= key_depth_per_head ** -0.5`, the `dense_relu_dense` FFN, a final
`layer_preprocess` norm, and the timing signal of `get_timing_signal_1d` (sines, then cosines).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import ConfigSpace, Chunk, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


class HParams:
    """The few transformer_base hparams the encoder reads."""

    def __init__(self, hidden_size=512, filter_size=2048, num_heads=8, num_hidden_layers=6, max_length=256):
        self.hidden_size = hidden_size
        self.filter_size = filter_size
        self.num_heads = num_heads
        self.num_encoder_layers = num_hidden_layers
        self.attention_key_channels = 0
        self.attention_value_channels = 0
        self.layer_preprocess_sequence = "n"
        self.layer_postprocess_sequence = "da"
        self.layer_prepostprocess_dropout = 0.1
        self.attention_dropout = 0.1
        self.relu_dropout = 0.1
        self.norm_type = "layer"
        self.norm_epsilon = 1e-6
        self.max_length = max_length
        self.min_timescale = 1.0
        self.max_timescale = 1.0e4


# ---- common_layers ------------------------------------------------------------------------

def layer_norm_compute(x, epsilon, scale, bias):
    """Layer norm raw computation (statistics in float32 at least)."""
    dtype = x.dtype
    x = x.to(torch.promote_types(dtype, torch.float32))
    mean = torch.mean(x, dim=-1, keepdim=True)
    variance = torch.mean(torch.square(x - mean), dim=-1, keepdim=True)
    norm_x = (x - mean) * torch.rsqrt(variance + epsilon)
    return norm_x.to(dtype) * scale + bias


class LayerNorm(nn.Module):
    """common_layers.layer_norm: a scale and a bias per channel."""

    def __init__(self, filters, epsilon=1e-6):
        super().__init__()
        self.epsilon = epsilon
        self.layer_norm_scale = nn.Parameter(torch.ones(filters))
        self.layer_norm_bias = nn.Parameter(torch.zeros(filters))

    def forward(self, x):
        return layer_norm_compute(x, self.epsilon, self.layer_norm_scale, self.layer_norm_bias)


def layer_prepostprocess(previous_value, x, sequence, dropout_rate, norm, training):
    """Apply a sequence of functions to the input or output of a layer:
    a: add previous_value, n: apply normalization, d: apply dropout."""
    for c in sequence:
        if c == "a":
            x = x + previous_value
        elif c == "n":
            x = norm(x)
        else:
            assert c == "d", ("Unknown sequence step %s" % c)
            x = F.dropout(x, p=dropout_rate, training=training)
    return x


def layer_preprocess(layer_input, hparams, norm, training=False):
    assert "a" not in hparams.layer_preprocess_sequence, ("No residual connections allowed in hparams.layer_preprocess_sequence")
    return layer_prepostprocess(None, layer_input, sequence=hparams.layer_preprocess_sequence, dropout_rate=hparams.layer_prepostprocess_dropout, norm=norm, training=training)


def layer_postprocess(layer_input, layer_output, hparams, training=False):
    return layer_prepostprocess(layer_input, layer_output, sequence=hparams.layer_postprocess_sequence, dropout_rate=hparams.layer_prepostprocess_dropout, norm=None, training=training)


class DenseReluDense(nn.Module):
    """common_layers.dense_relu_dense: dense + relu, dropout, dense (both with bias)."""

    def __init__(self, input_size, filter_size, output_size, dropout=0.0):
        super().__init__()
        self.conv1 = nn.Linear(input_size, filter_size, bias=True)
        self.conv2 = nn.Linear(filter_size, output_size, bias=True)
        self.dropout = dropout

    def forward(self, inputs):
        h = F.relu(self.conv1(inputs))
        if self.dropout != 0.0:
            h = F.dropout(h, p=self.dropout, training=self.training)
        o = self.conv2(h)
        return o


# ---- common_attention ---------------------------------------------------------------------

def large_compatible_negative(tensor_type):
    """Large negative number as Tensor: -1e9 unless the dtype cannot hold it (float16)."""
    if tensor_type == torch.float16:
        return torch.finfo(torch.float16).min
    return -1e9


def attention_bias_ignore_padding(memory_padding):
    """memory_padding [batch, memory_length], 1.0 at the pads -> a bias [batch, 1, 1, memory_length]."""
    ret = memory_padding * large_compatible_negative(memory_padding.dtype)
    return ret.unsqueeze(1).unsqueeze(1)


def attention_bias_lower_triangle(length, dtype, device=None):
    """A bias [1, 1, length, length] that lets position i attend positions j <= i only."""
    band = torch.tril(torch.ones(length, length, dtype=dtype, device=device))
    ret = large_compatible_negative(dtype) * (1.0 - band)
    return ret.reshape(1, 1, length, length)


def split_last_dimension(x, n):
    """Reshape x so that the last dimension becomes two dimensions: [..., m] -> [..., n, m/n]."""
    *lead, m = x.shape
    return x.reshape(*lead, n, m // n)


def combine_last_two_dimensions(x):
    """Reshape x so that the last two dimensions become one: [..., a, b] -> [..., ab]."""
    *lead, a, b = x.shape
    return x.reshape(*lead, a * b)


def split_heads(x, num_heads):
    """[batch, length, channels] -> [batch, num_heads, length, channels / num_heads]"""
    return split_last_dimension(x, num_heads).permute(0, 2, 1, 3)


def combine_heads(x):
    """[batch, num_heads, length, channels / num_heads] -> [batch, length, channels]"""
    return combine_last_two_dimensions(x.permute(0, 2, 1, 3))


def dot_product_attention(q, k, v, bias, dropout_rate=0.0, training=False):
    """q [batch, heads, length_q, depth_k], k [.., length_kv, depth_k], v [.., length_kv, depth_v]."""
    logits = torch.matmul(q, k.transpose(-1, -2))  # [..., length_q, length_kv]
    if bias is not None:
        bias = bias.to(logits.dtype)
        logits = logits + bias
    weights = F.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32)).to(q.dtype)
    weights = F.dropout(weights, p=dropout_rate, training=training)
    return torch.matmul(weights, v)


def get_timing_signal_1d_given_position(channels, position, min_timescale=1.0, max_timescale=1.0e4):
    """The timing signal at the given positions: channels // 2 sines, then as many cosines."""
    num_timescales = channels // 2
    log_timescale_increment = (math.log(float(max_timescale) / float(min_timescale)) / max(float(num_timescales), 1.0))
    inv_timescales = min_timescale * torch.exp(torch.arange(num_timescales, dtype=torch.float64) * -log_timescale_increment)
    scaled_time = position.to(torch.float64).unsqueeze(-1) * inv_timescales.unsqueeze(0)
    signal = torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=-1)
    signal = F.pad(signal, (0, channels % 2))
    return signal


class MultiheadAttention(nn.Module):
    """common_attention.multihead_attention: bias-free q, k, v and output transforms."""

    def __init__(self, hidden_size, total_key_depth, total_value_depth, output_depth, num_heads, dropout_rate=0.0):
        super().__init__()
        if total_key_depth % num_heads != 0:
            raise ValueError("Key depth (%d) must be divisible by the number of attention heads (%d)." % (total_key_depth, num_heads))
        if total_value_depth % num_heads != 0:
            raise ValueError("Value depth (%d) must be divisible by the number of attention heads (%d)." % (total_value_depth, num_heads))
        self.num_heads = num_heads
        self.total_key_depth = total_key_depth
        self.dropout_rate = dropout_rate
        self.q = nn.Linear(hidden_size, total_key_depth, bias=False)
        self.k = nn.Linear(hidden_size, total_key_depth, bias=False)
        self.v = nn.Linear(hidden_size, total_value_depth, bias=False)
        self.output_transform = nn.Linear(total_value_depth, output_depth, bias=False)

    def compute_qkv(self, query_antecedent, memory_antecedent, value_antecedent):
        q = self.q(query_antecedent)
        k = self.k(memory_antecedent)
        v = self.v(value_antecedent)
        return q, k, v

    def forward(self, query_antecedent, memory_antecedent, bias, value_antecedent=None):
        if memory_antecedent is None:
            memory_antecedent = query_antecedent
        if value_antecedent is None:
            value_antecedent = memory_antecedent
        q, k, v = self.compute_qkv(query_antecedent, memory_antecedent, value_antecedent)
        q = split_heads(q, self.num_heads)
        k = split_heads(k, self.num_heads)
        v = split_heads(v, self.num_heads)
        key_depth_per_head = self.total_key_depth // self.num_heads
        q = q * key_depth_per_head**-0.5
        x = dot_product_attention(q, k, v, bias, self.dropout_rate, self.training)
        x = combine_heads(x)
        x = self.output_transform(x)
        return x


class TransformerEncoderLayer(nn.Module):
    def __init__(self, hparams):
        super().__init__()
        self.hparams = hparams
        self.self_attention = MultiheadAttention(hparams.hidden_size, hparams.attention_key_channels or hparams.hidden_size, hparams.attention_value_channels or hparams.hidden_size, hparams.hidden_size, hparams.num_heads, hparams.attention_dropout)
        self.self_attention_norm = LayerNorm(hparams.hidden_size, hparams.norm_epsilon)
        self.ffn = DenseReluDense(hparams.hidden_size, hparams.filter_size, hparams.hidden_size, dropout=hparams.relu_dropout)
        self.ffn_norm = LayerNorm(hparams.hidden_size, hparams.norm_epsilon)

    def forward(self, x, encoder_self_attention_bias):
        hparams = self.hparams
        y = self.self_attention(layer_preprocess(x, hparams, self.self_attention_norm, self.training), None, encoder_self_attention_bias)
        x = layer_postprocess(x, y, hparams, self.training)
        y = self.ffn(layer_preprocess(x, hparams, self.ffn_norm, self.training))
        x = layer_postprocess(x, y, hparams, training=self.training)
        return x


class TransformerEncoder(nn.Module):
    """transformer.transformer_encoder: the layers, then a final layer_preprocess norm."""

    def __init__(self, hparams):
        super().__init__()
        self.hparams = hparams
        self.layers = nn.ModuleList([TransformerEncoderLayer(hparams) for _ in range(hparams.num_encoder_layers)])
        self.norm = LayerNorm(hparams.hidden_size, hparams.norm_epsilon)

    def forward(self, encoder_input, encoder_self_attention_bias):
        x = encoder_input
        for layer in self.layers:
            x = layer(x, encoder_self_attention_bias)
        return layer_preprocess(x, self.hparams, self.norm, self.training)


class TimingSignal(nn.Module):
    """add_timing_signal_1d's table as a module (no parameters), in the module's dtype."""

    def __init__(self, hparams):
        super().__init__()
        if hparams.hidden_size % 2:
            raise ValueError(f"the timing signal needs an even number of channels, got {hparams.hidden_size}")
        self.hparams = hparams
        self.register_buffer("dtype_anchor", torch.zeros(0), persistent=False)

    def forward(self, position):
        if int(position.max()) >= self.hparams.max_length:
            raise ValueError(f"position {int(position.max())} is beyond max_length {self.hparams.max_length}")
        signal = get_timing_signal_1d_given_position(self.hparams.hidden_size, position, self.hparams.min_timescale, self.hparams.max_timescale)
        return signal.to(self.dtype_anchor.dtype)


# ---- the adapter ------------------------------------------------------------------------

def hparams_of(config):
    return HParams(hidden_size=config.d_model, filter_size=config.d_ff, num_heads=config.n_heads, num_hidden_layers=config.n_layers, max_length=config.max_len)


def encoder_bias(x, key_padding=None, causal=False, length_q=None):
    """tensor2tensor's attention biases from the kit's keep-mask (True = a real token)."""
    bias = None
    if key_padding is not None:
        memory_padding = 1.0 - torch.as_tensor(key_padding, device=x.device).to(x.dtype)
        bias = attention_bias_ignore_padding(memory_padding)
    if causal is not None and bool(causal):
        lower = attention_bias_lower_triangle(x.shape[1], x.dtype, x.device)
        bias = lower if bias is None else bias + lower
    return bias


def mha_forward(mha, query, key, value, key_padding=None):
    bias = encoder_bias(key, key_padding)
    return mha(query, key, bias, value_antecedent=value)


def layer_forward(layer, x, key_padding=None, causal=None):
    return layer(x, encoder_bias(x, key_padding, causal))


def encoder_forward(encoder, x, key_padding=None, causal=None):
    return encoder(x, encoder_bias(x, key_padding, causal))


def pe_forward(timing, positions):
    return timing(torch.as_tensor(positions, dtype=torch.int64))


def make_mha(config):
    h = hparams_of(config)
    return MultiheadAttention(h.hidden_size, h.hidden_size, h.hidden_size, h.hidden_size, h.num_heads, h.attention_dropout)


def mha_map(prefix=""):
    out = {f"{p}.weight": f"{prefix}{p}.weight" for p in "qkv"}
    out["o.weight"] = f"{prefix}output_transform.weight"
    return out


def layer_map(prefix=""):
    out = {f"self_attn.{k}": v for k, v in mha_map(f"{prefix}self_attention.").items()}
    out |= {"norm1.weight": f"{prefix}self_attention_norm.layer_norm_scale", "norm1.bias": f"{prefix}self_attention_norm.layer_norm_bias"}
    out |= {"norm2.weight": f"{prefix}ffn_norm.layer_norm_scale", "norm2.bias": f"{prefix}ffn_norm.layer_norm_bias"}
    for p in ("weight", "bias"):
        out[f"ffn.fc1.{p}"] = f"{prefix}ffn.conv1.{p}"
        out[f"ffn.fc2.{p}"] = f"{prefix}ffn.conv2.{p}"
    return out


def encoder_map(config):
    out = {}
    for i in range(config.n_layers):
        out |= {f"layers.{i}.{k}": v for k, v in layer_map(f"layers.{i}.").items()}
    out |= {"norm.weight": "norm.layer_norm_scale", "norm.bias": "norm.layer_norm_bias"}
    return out


PE_CONVENTIONS = Conventions(pe_layout="concatenated")
CONVENTIONS = Conventions(norm_placement="pre", eps=1e-6, fully_masked_rows="undefined")
CONFIG = {"attention_bias": False, "ffn_bias": True}
SPACE = ConfigSpace(split_heads=True, max_len=512, biases={"attention": False, "ffn": True})

adapter = TorchModuleAdapter("t2t-encoder", [
    TorchEntry("sinusoidal_pe", make=lambda config: TimingSignal(hparams_of(config)), forward=pe_forward,
               conventions=PE_CONVENTIONS, supports=ConfigSpace(max_len=512)),
    TorchEntry("mha", make=make_mha, forward=mha_forward, param_map=mha_map(),
               conventions=CONVENTIONS, config=CONFIG, supports=SPACE),
    TorchEntry("encoder_layer", make=lambda config: TransformerEncoderLayer(hparams_of(config)), forward=layer_forward,
               param_map=layer_map(), conventions=CONVENTIONS, config=CONFIG, supports=SPACE),
    TorchEntry("encoder", make=lambda config: TransformerEncoder(hparams_of(config)), forward=encoder_forward,
               param_map=encoder_map, conventions=CONVENTIONS, config=CONFIG, supports=SPACE),
])
