# fmt: off
# ruff: noqa
"""keras-hub's ``TransformerEncoder`` (``keras_hub/src/layers/modeling/transformer_encoder.py``)
over Keras' ``MultiHeadAttention`` and ``EinsumDense``, ported to torch for the
twenty-fifth blind set.

Keras writes attention with ``EinsumDense`` layers whose kernels keep the heads apart: the query,
key and value kernels are ``[D, H, d]`` (``"abc,cde->abde"``), the output kernel ``[H, d, D]``
(``"abcd,cde->abe"``); the scores are ``einsum("aecd,abcd->acbe", key, query)`` after the query
is multiplied by ``1 / sqrt(key_dim)``; the mask is a ``[B, T, S]`` boolean (keras-hub's
``merge_padding_and_attention_mask`` expands the ``[B, S]`` padding mask over the queries) that
the ``Softmax`` layer turns into an additive ``(1 - mask) * large_negative``; ``Dense`` kernels
are ``[in, out]``. The layer is post-LN unless ``normalize_first``; keras-hub's default
``layer_norm_epsilon`` is 1e-5. The stack is the loop of BERT-like backbones (no final norm).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def _large_negative_number(dtype):
  """Return a large negative number based on dtype (keras.layers.Softmax)."""
  if dtype == torch.float16:
    return -3e4
  return -1e9


def compute_causal_mask(batch_size, input_length, output_length, cache_index=0):
  i = torch.arange(output_length)[:, None] + cache_index
  j = torch.arange(input_length)[None, :]
  mask = i >= j
  return mask[None].expand(batch_size, -1, -1)


def merge_padding_and_attention_mask(inputs, padding_mask, attention_mask):
  mask = padding_mask
  if mask is not None:
    mask = mask[:, None, :].bool()  # [B, 1, S]: the same keys for every query
  if attention_mask is not None:
    attention_mask = attention_mask.bool()
    if mask is None:
      return attention_mask
    return torch.minimum(mask, attention_mask)
  return mask


class EinsumDense(nn.Module):
  def __init__(self, equation, kernel_shape, bias_shape=None):
    super().__init__()
    self.equation = equation
    self.kernel = nn.Parameter(torch.empty(kernel_shape))
    nn.init.trunc_normal_(self.kernel, std=0.02)
    self.bias = nn.Parameter(torch.zeros(bias_shape)) if bias_shape is not None else None

  def forward(self, inputs):
    ret = torch.einsum(self.equation, inputs, self.kernel)
    if self.bias is not None:
      ret = ret + self.bias
    return ret


class Dense(nn.Module):
  def __init__(self, input_dim, units, activation=None, use_bias=True):
    super().__init__()
    self.kernel = nn.Parameter(nn.init.trunc_normal_(torch.empty(input_dim, units), std=0.02))
    self.bias = nn.Parameter(torch.zeros(units)) if use_bias else None
    self.activation = activation

  def forward(self, inputs):
    x = torch.matmul(inputs, self.kernel)
    if self.bias is not None:
      x = x + self.bias
    if self.activation is not None:
      x = self.activation(x)
    return x


class Softmax(nn.Module):
  def __init__(self, axis=-1):
    super().__init__()
    self.axis = axis

  def forward(self, inputs, mask=None):
    if mask is not None:
      adder = (1.0 - mask.to(inputs.dtype)) * _large_negative_number(inputs.dtype)
      inputs = inputs + adder
    dtype = inputs.dtype
    return torch.softmax(inputs.to(torch.promote_types(dtype, torch.float32)), dim=self.axis).to(dtype)


class MultiHeadAttention(nn.Module):
  def __init__(self, num_heads, key_dim, hidden_dim, value_dim=None, dropout=0.0, use_bias=True):
    super().__init__()
    self._num_heads = num_heads
    self._key_dim = key_dim
    self._value_dim = value_dim if value_dim else key_dim
    self._dropout = dropout
    bias = (lambda dim: (num_heads, dim)) if use_bias else (lambda dim: None)
    self._query_dense = EinsumDense("abc,cde->abde", (hidden_dim, num_heads, self._key_dim), bias(self._key_dim))
    self._key_dense = EinsumDense("abc,cde->abde", (hidden_dim, num_heads, self._key_dim), bias(self._key_dim))
    self._value_dense = EinsumDense("abc,cde->abde", (hidden_dim, num_heads, self._value_dim), bias(self._value_dim))
    self._output_dense = EinsumDense("abcd,cde->abe", (num_heads, self._value_dim, hidden_dim), hidden_dim if use_bias else None)
    self._softmax = Softmax(axis=-1)
    self._dropout_layer = nn.Dropout(p=self._dropout)
    self._inverse_sqrt_key_dim = 1.0 / math.sqrt(float(self._key_dim))
    self._dot_product_equation = "aecd,abcd->acbe"
    self._combine_equation = "acbe,aecd->abcd"

  def _masked_softmax(self, attention_scores, attention_mask=None):
    # Normalize the attention scores to probabilities.
    # attention_scores = [B, N, T, S]
    if attention_mask is not None:
      # The expand dim happens starting from the `num_heads` dimension,
      # (<batch_dims>, num_heads, <query_attention_dims, key_attention_dims>)
      mask_expansion_axis = -3
      for _ in range(len(attention_scores.shape) - len(attention_mask.shape)):
        attention_mask = attention_mask.unsqueeze(mask_expansion_axis)
    return self._softmax(attention_scores, mask=attention_mask)

  def _compute_attention(self, query, key, value, attention_mask=None, training=None):
    # Note: Applying scalar multiply at the smaller end of einsum improves
    # XLA performance, but may introduce slight numeric differences in
    # the Transformer attention head.
    query = query * self._inverse_sqrt_key_dim

    # Take the dot product between "query" and "key" to get the raw
    # attention scores.
    attention_scores = torch.einsum(self._dot_product_equation, key, query)

    attention_scores = self._masked_softmax(attention_scores, attention_mask)

    # This is actually dropping out entire tokens to attend to, which might
    # seem a bit unusual, but is taken from the original Transformer paper.
    final_attn_scores = self._dropout_layer(attention_scores)

    # `context_layer` = [B, T, N, H]
    attention_output = torch.einsum(self._combine_equation, final_attn_scores, value)
    return attention_output, attention_scores

  def forward(self, query, value, key=None, attention_mask=None, use_causal_mask=False, training=None):
    if key is None:
      key = value
    attention_mask = self._compute_attention_mask(query, value, attention_mask, use_causal_mask)

    #   N = `num_attention_heads`
    #   H = `size_per_head`
    # `query` = [B, T, N ,H]
    query = self._query_dense(query)

    # `key` = [B, S, N, H]
    key = self._key_dense(key)

    # `value` = [B, S, N, H]
    value = self._value_dense(value)

    attention_output, attention_scores = self._compute_attention(query, key, value, attention_mask, training)
    attention_output = self._output_dense(attention_output)
    return attention_output

  def _compute_attention_mask(self, query, value, attention_mask=None, use_causal_mask=False):
    auto_mask = None
    if use_causal_mask:
      # the shape of the causal mask is [1, T, S]
      mask = self._compute_causal_mask(query, value)
      auto_mask = mask if auto_mask is None else auto_mask & mask
    if auto_mask is not None:
      # merge attention_mask & automatic mask, to shape [B, T, S]
      attention_mask = auto_mask if attention_mask is None else attention_mask.bool() & auto_mask
    return attention_mask

  def _compute_causal_mask(self, query, value=None):
    q_seq_length = query.shape[1]
    v_seq_length = q_seq_length if value is None else value.shape[1]
    ones_mask = torch.ones((1, q_seq_length, v_seq_length), dtype=torch.int32)
    row_index = torch.cumsum(ones_mask, dim=-2)
    col_index = torch.cumsum(ones_mask, dim=-1)
    return torch.greater_equal(row_index, col_index)


class TransformerEncoder(nn.Module):
  def __init__(self, intermediate_dim, num_heads, hidden_dim, dropout=0, activation="relu", layer_norm_epsilon=1e-05, normalize_first=False, use_bias=True, ffn_bias=True):
    super().__init__()
    self.intermediate_dim = intermediate_dim
    self.num_heads = num_heads
    self.dropout = dropout
    self.layer_norm_epsilon = layer_norm_epsilon
    self.normalize_first = normalize_first
    key_dim = int(hidden_dim // self.num_heads)
    if key_dim == 0:
      raise ValueError(f"Attention `key_dim` computed cannot be zero. The `hidden_dim` value of {hidden_dim} has to be equal to or greater than `num_heads` value of {num_heads}.")

    # Self attention layers.
    self._self_attention_layer = MultiHeadAttention(num_heads=num_heads, key_dim=key_dim, hidden_dim=hidden_dim, dropout=dropout, use_bias=use_bias)
    self._self_attention_layer_norm = nn.LayerNorm(hidden_dim, eps=self.layer_norm_epsilon)
    self._self_attention_dropout = nn.Dropout(p=dropout)

    # Feedforward layers.
    self._feedforward_layer_norm = nn.LayerNorm(hidden_dim, eps=self.layer_norm_epsilon)
    self._feedforward_intermediate_dense = Dense(hidden_dim, self.intermediate_dim, activation=nn.ReLU() if activation == "relu" else nn.GELU(), use_bias=ffn_bias)
    self._feedforward_output_dense = Dense(self.intermediate_dim, hidden_dim, use_bias=ffn_bias)
    self._feedforward_dropout = nn.Dropout(p=dropout)

  def forward(self, inputs, padding_mask=None, attention_mask=None, training=None, use_causal_mask=False):
    x = inputs  # Intermediate result.

    # Compute self attention mask.
    self_attention_mask = merge_padding_and_attention_mask(inputs, padding_mask, attention_mask)
    if use_causal_mask:
      batch_size, input_length = inputs.shape[0], inputs.shape[1]
      causal_mask = compute_causal_mask(batch_size, input_length, input_length)
      self_attention_mask = causal_mask if self_attention_mask is None else self_attention_mask & causal_mask

    # Self attention block.
    residual = x  # self attention
    if self.normalize_first:  # pre-LN self attention
      x = self._self_attention_layer_norm(x)
    x = self._self_attention_layer(query=x, value=x, attention_mask=self_attention_mask, training=training)
    x = self._self_attention_dropout(x)
    x = x + residual  # self attention
    if not self.normalize_first:  # post-LN self attention
      x = self._self_attention_layer_norm(x)

    # Feedforward block.
    residual = x  # feedforward
    if self.normalize_first:  # pre-LN feedforward
      x = self._feedforward_layer_norm(x)
    x = self._feedforward_intermediate_dense(x)
    x = self._feedforward_output_dense(x)
    x = self._feedforward_dropout(x)
    x = x + residual  # feedforward
    if not self.normalize_first:  # post-LN feedforward
      x = self._feedforward_layer_norm(x)

    return x


class TransformerLayers(nn.Module):
  """The loop of a BERT-like keras-hub backbone over its ``transformer_layer_{i}``."""

  def __init__(self, num_layers, **kwargs):
    super().__init__()
    self.transformer_layers = nn.ModuleList([TransformerEncoder(**kwargs) for _ in range(num_layers)])

  def forward(self, x, padding_mask=None, attention_mask=None, use_causal_mask=False):
    for transformer_layer in self.transformer_layers:
      x = transformer_layer(x, padding_mask=padding_mask, attention_mask=attention_mask, use_causal_mask=use_causal_mask)
    return x


# ---- the adapter -----------------------------------------------------------------------------

EPS = 1e-12  # BertBackbone's layer_norm_epsilon


def _bool(mask):
  return None if mask is None else torch.as_tensor(mask).bool()


def mha_forward(layer, query, key, value, key_padding=None, attn_mask=None, causal=None):
  mask = None
  if key_padding is not None:
    mask = _bool(key_padding)[:, None, :].expand(-1, query.shape[1], -1)
  if attn_mask is not None:
    am = _bool(attn_mask)
    am = am if am.dim() == 3 else am[None].expand(query.shape[0], -1, -1)
    mask = am if mask is None else mask & am
  return layer(query=query, value=value, key=key, attention_mask=mask, use_causal_mask=bool(causal))


def layer_forward(layer, x, key_padding=None, attn_mask=None, causal=None):
  am = _bool(attn_mask)
  if am is not None and am.dim() == 2:
    am = am[None].expand(x.shape[0], -1, -1)
  return layer(x, padding_mask=_bool(key_padding), attention_mask=am, use_causal_mask=bool(causal))


def make_mha(config):
  return MultiHeadAttention(num_heads=config.n_heads, key_dim=config.d_model // config.n_heads, hidden_dim=config.d_model)


def _layer_kwargs(config):
  return dict(intermediate_dim=config.d_ff, num_heads=config.n_heads, hidden_dim=config.d_model, layer_norm_epsilon=EPS)


def mha_map(config, prefix=""):
  H, D = config.n_heads, config.d_model
  out = {}
  for name, dense in (("q", "_query_dense"), ("k", "_key_dense"), ("v", "_value_dense")):
    out[f"{prefix}{name}.weight"] = Param(f"{dense}.kernel", permute=(1, 2, 0))
    out[f"{prefix}{name}.bias"] = Param(f"{dense}.bias")
  out[f"{prefix}o.weight"] = Param("_output_dense.kernel", permute=(2, 0, 1))
  out[f"{prefix}o.bias"] = "_output_dense.bias"
  return out


def layer_map(config, canonical="", mine=""):
  out = {}
  for k, v in mha_map(config).items():
    name = v.name if isinstance(v, Param) else v
    mapped = f"{mine}_self_attention_layer.{name}"
    out[f"{canonical}self_attn.{k}"] = Param(mapped, permute=v.permute) if isinstance(v, Param) else mapped
  for p in ("weight", "bias"):
    out[f"{canonical}norm1.{p}"] = f"{mine}_self_attention_layer_norm.{p}"
    out[f"{canonical}norm2.{p}"] = f"{mine}_feedforward_layer_norm.{p}"
  out[f"{canonical}ffn.fc1.weight"] = Param(f"{mine}_feedforward_intermediate_dense.kernel", permute=(1, 0))
  out[f"{canonical}ffn.fc1.bias"] = f"{mine}_feedforward_intermediate_dense.bias"
  out[f"{canonical}ffn.fc2.weight"] = Param(f"{mine}_feedforward_output_dense.kernel", permute=(1, 0))
  out[f"{canonical}ffn.fc2.bias"] = f"{mine}_feedforward_output_dense.bias"
  return out


def stack_map(config):
  out = {}
  for i in range(config.n_layers):
    out |= layer_map(config, f"layers.{i}.", f"transformer_layers.{i}.")
  return out


POST = Conventions(eps=EPS, fully_masked_rows="undefined")
SPACE = ConfigSpace(split_heads=True)

adapter = TorchModuleAdapter("kerashub-encoder", [
  TorchEntry("mha", make=make_mha, forward=mha_forward, param_map=mha_map, conventions=Conventions(fully_masked_rows="undefined"), supports=SPACE),
  TorchEntry("encoder_layer", make=lambda config: TransformerEncoder(**_layer_kwargs(config)), forward=layer_forward,
             param_map=layer_map, conventions=POST, supports=SPACE),
  TorchEntry("encoder", make=lambda config: TransformerLayers(config.n_layers, **_layer_kwargs(config)), forward=layer_forward,
             param_map=stack_map, conventions=POST, supports=SPACE),
])
