# fmt: off
# ruff: noqa
"""Llama as KerasHub writes it (keras_hub/src/models/llama/*.py and
keras_hub/src/layers/modeling/{rotary_embedding,reversible_embedding,transformer_layer_utils}.py),
ported to torch line by line: EinsumDense kernels kept in Keras' layout, a keras-style masked
Softmax, one stacked (batch, 2, max_length, num_key_value_heads, head_dim) cache per layer
written in place at ``cache_update_index``, and ``call_with_cache`` on the causal LM.
"""

import math

import torch
from torch import nn

from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


# ---------------------------------------------------------------- keras shims (ops.*)
def _large_negative_number(dtype):
    """Return a Large negative number based on dtype."""
    if dtype == torch.float16:
        return -3e4
    return -1e9


class Softmax(nn.Module):
    """keras.layers.Softmax(axis=-1, dtype="float32") with its `mask` argument."""

    def __init__(self, axis=-1):
        super().__init__()
        self.axis = axis

    def forward(self, inputs, mask=None):
        compute = torch.promote_types(inputs.dtype, torch.float32)
        inputs = inputs.to(compute)
        if mask is not None:
            adder = (1.0 - mask.to(inputs.dtype)) * _large_negative_number(inputs.dtype)
            inputs = inputs + adder
        return torch.softmax(inputs, dim=self.axis)


class EinsumDense(nn.Module):
    """keras.layers.EinsumDense without bias: the kernel keeps Keras' layout."""

    def __init__(self, equation, kernel_shape):
        super().__init__()
        self.equation = equation
        self.kernel = nn.Parameter(torch.empty(kernel_shape))
        nn.init.normal_(self.kernel, std=0.02)

    def forward(self, inputs):
        return torch.einsum(self.equation, inputs, self.kernel)


class Dense(nn.Module):
    """keras.layers.Dense(use_bias=False): kernel (input_dim, units)."""

    def __init__(self, input_dim, units):
        super().__init__()
        self.kernel = nn.Parameter(torch.empty(input_dim, units))
        nn.init.normal_(self.kernel, std=0.02)

    def forward(self, inputs):
        return torch.matmul(inputs, self.kernel)


class Dropout(nn.Module):
    def __init__(self, rate):
        super().__init__()
        self.rate = rate

    def forward(self, inputs, training=False):
        if training and self.rate > 0:
            return nn.functional.dropout(inputs, self.rate, training=True)
        return inputs


def slice_update(inputs, start_indices, updates):
    """keras.ops.slice_update."""
    out = inputs.clone()
    slices = tuple(slice(s, s + n) for s, n in zip(start_indices, updates.shape))
    out[slices] = updates
    return out


# ---------------------------------------------------------------- transformer_layer_utils
def _check_masks_shapes(inputs, padding_mask, attention_mask):
    mask = padding_mask
    if hasattr(inputs, "_keras_mask") and mask is None:
        mask = inputs._keras_mask
    if mask is not None and mask.dim() != 2:
        raise ValueError(f"`padding_mask` should have shape (batch_size, target_length). Received shape `{tuple(mask.shape)}`.")
    if attention_mask is not None and attention_mask.dim() != 3:
        raise ValueError(f"`attention_mask` should have shape (batch_size, target_length, source_length). Received shape `{tuple(attention_mask.shape)}`.")


def compute_causal_mask(batch_size, input_length, output_length, cache_index=0):
    """Compute a causal attention mask for a transformer decoder."""
    i = torch.arange(output_length)[:, None] + cache_index
    j = torch.arange(input_length)[None, :]
    mask = (i >= j).to(torch.int32).unsqueeze(0)
    return mask.expand(batch_size, output_length, input_length)


def merge_padding_and_attention_mask(inputs, padding_mask, attention_mask):
    """Merge the padding mask with a customized attention mask."""
    _check_masks_shapes(inputs, padding_mask, attention_mask)
    mask = padding_mask
    if hasattr(inputs, "_keras_mask"):
        if mask is None:
            mask = inputs._keras_mask
    if mask is not None:
        # Add an axis for broadcasting, the attention mask should be 2D
        # (not including the batch axis).
        mask = mask[:, None, :].to(torch.int32)
    if attention_mask is not None:
        attention_mask = attention_mask.to(torch.int32)
        if mask is None:
            return attention_mask
        else:
            return torch.minimum(mask, attention_mask)
    return mask


# ---------------------------------------------------------------- RotaryEmbedding
class RotaryEmbedding(nn.Module):
    """Rotary positional encoding layer (keras_hub.layers.RotaryEmbedding)."""

    def __init__(self, max_wavelength=10000, scaling_factor=1.0, sequence_axis=1, feature_axis=-1):
        super().__init__()
        self.max_wavelength = max_wavelength
        self.sequence_axis = sequence_axis
        self.feature_axis = feature_axis
        self.scaling_factor = scaling_factor

    def forward(self, inputs, start_index=0, positions=None):
        inputs = torch.movedim(inputs, (self.feature_axis, self.sequence_axis), (-1, 1))
        cos_emb, sin_emb = self._compute_cos_sin_embedding(inputs, start_index, positions)
        output = self._apply_rotary_pos_emb(inputs, cos_emb, sin_emb)
        return torch.movedim(output, (-1, 1), (self.feature_axis, self.sequence_axis))

    def _apply_rotary_pos_emb(self, tensor, cos_emb, sin_emb):
        x1, x2 = torch.chunk(tensor, 2, dim=-1)
        half_rot_tensor = torch.stack((-x2, x1), dim=-2)
        half_rot_tensor = torch.reshape(half_rot_tensor, tensor.shape)
        return (tensor * cos_emb) + (half_rot_tensor * sin_emb)

    def _compute_positions(self, inputs, start_index=0):
        seq_len = inputs.shape[1]
        positions = torch.arange(seq_len, dtype=torch.float64)
        return positions + float(start_index)

    def _compute_cos_sin_embedding(self, inputs, start_index=0, positions=None):
        feature_axis = len(inputs.shape) - 1
        sequence_axis = 1

        rotary_dim = inputs.shape[feature_axis]
        inverse_freq = self._get_inverse_freq(rotary_dim)

        if positions is None:
            positions = self._compute_positions(inputs, start_index)
            positions = positions.unsqueeze(0)
        else:
            positions = positions.to(torch.float64)

        positions = positions / self.scaling_factor
        freq = torch.einsum("bi,j->bij", positions, inverse_freq)
        embedding = torch.stack((freq, freq), dim=-2)
        embedding = torch.reshape(embedding, (*freq.shape[:-1], freq.shape[-1] * 2))

        # Reshape the embedding to be broadcastable with input shape.
        if feature_axis < sequence_axis:
            embedding = embedding.transpose(-1, -2)
        for axis in range(len(inputs.shape)):
            if axis != sequence_axis and axis != feature_axis and axis != 0:
                embedding = embedding.unsqueeze(axis)

        cos_emb = torch.cos(embedding).to(inputs.dtype)
        sin_emb = torch.sin(embedding).to(inputs.dtype)
        return cos_emb, sin_emb

    def _get_inverse_freq(self, rotary_dim):
        freq_range = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim
        inverse_freq = 1.0 / (self.max_wavelength**freq_range)
        return inverse_freq


# ---------------------------------------------------------------- ReversibleEmbedding
class ReversibleEmbedding(nn.Module):
    """An embedding layer which can project backwards to the input dim."""

    def __init__(self, input_dim, output_dim, tie_weights=True):
        super().__init__()
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.tie_weights = tie_weights
        self.embeddings = nn.Parameter(torch.empty(input_dim, output_dim))
        nn.init.normal_(self.embeddings, std=0.01)
        if not self.tie_weights:
            self.reverse_embeddings = nn.Parameter(torch.empty(output_dim, input_dim))
            nn.init.normal_(self.reverse_embeddings, std=0.01)

    def forward(self, inputs, reverse=False):
        if reverse:
            if self.tie_weights:
                kernel = self.embeddings.transpose(0, 1)
            else:
                kernel = self.reverse_embeddings
            logits = torch.matmul(inputs, kernel)
            return logits
        return nn.functional.embedding(inputs, self.embeddings)


# ---------------------------------------------------------------- llama_layernorm.py
class LlamaLayerNorm(nn.Module):
    """A normalization layer for Llama that implements RMS normalization."""

    def __init__(self, hidden_dim, epsilon=1e-6):
        super().__init__()
        self.epsilon = epsilon
        self.scale = nn.Parameter(torch.ones(hidden_dim))

    def forward(self, x):
        compute_dtype = x.dtype
        x = x.to(torch.promote_types(x.dtype, torch.float32))
        var = torch.mean(torch.square(x), dim=-1, keepdim=True)
        x = x * torch.rsqrt(var + self.epsilon)
        return x.to(compute_dtype) * self.scale.to(compute_dtype)


# ---------------------------------------------------------------- llama_attention.py
class LlamaAttention(nn.Module):
    """A cached grounded query attention layer with sliding window."""

    def __init__(self, num_query_heads, num_key_value_heads, hidden_dim, rope_max_wavelength=10000, rope_scaling_factor=1.0, dropout=0):
        super().__init__()
        self.num_query_heads = num_query_heads
        self.num_key_value_heads = num_key_value_heads
        self.dropout = dropout

        self.num_key_value_groups = num_query_heads // num_key_value_heads
        self.rope_max_wavelength = rope_max_wavelength

        self.rope_scaling_factor = rope_scaling_factor

        # build(inputs_shape)
        self._hidden_dim = hidden_dim
        head_dim = hidden_dim // self.num_query_heads
        self._inv_norm_factor = 1.0 / math.sqrt(head_dim)
        self._query_dense = EinsumDense("bqm,muh->bquh", (hidden_dim, self.num_query_heads, head_dim))
        self._key_dense = EinsumDense("bkm,mvh->bkvh", (hidden_dim, self.num_key_value_heads, head_dim))
        self._value_dense = EinsumDense("bkm,mvh->bkvh", (hidden_dim, self.num_key_value_heads, head_dim))

        self._softmax = Softmax(axis=-1)

        self._dropout_layer = Dropout(rate=self.dropout)

        self._output_dense = EinsumDense("bquh,uhm->bqm", (self.num_query_heads, head_dim, hidden_dim))

        self.rotary_embedding_layer = RotaryEmbedding(
            max_wavelength=self.rope_max_wavelength,
            scaling_factor=self.rope_scaling_factor,
        )

        self._dot_product_equation = "bquh,bkuh->buqk"
        self._combine_equation = "buqk,bkuh->bquh"

    def forward(self, hidden_states, attention_mask=None, cache=None, cache_update_index=None, positions=None, training=None):
        start_index = cache_update_index if cache_update_index is not None else 0

        query = self._query_dense(hidden_states)

        # Compute RoPE for queries
        query = self.rotary_embedding_layer(query, start_index=start_index, positions=positions)

        def _compute_key_value(x):
            key, value = self._key_dense(x), self._value_dense(x)
            # Compute RoPE for keys
            key = self.rotary_embedding_layer(key, start_index=start_index, positions=positions)
            return key, value

        if cache is not None:
            key_cache = cache[:, 0, ...]
            value_cache = cache[:, 1, ...]
            if cache_update_index is None:
                key = key_cache
                value = value_cache
            else:
                key_update, value_update = _compute_key_value(hidden_states)
                start = [0, cache_update_index, 0, 0]
                key = slice_update(key_cache, start, key_update)
                value = slice_update(value_cache, start, value_update)
                cache = torch.stack((key, value), dim=1)
        else:
            if cache_update_index is not None:
                raise ValueError(
                    "`cache_update_index` should not be set if `cache` is "
                    f"`None`. Received: cache={cache}, "
                    f"cache_update_index={cache_update_index}"
                )
            key, value = _compute_key_value(hidden_states)

        # [batch_shape, seq_len, num_key_value_heads, head_dim]
        # -> [batch_shape, seq_len, num_heads, head_dim]
        key = torch.repeat_interleave(key, repeats=self.num_key_value_groups, dim=2)
        value = torch.repeat_interleave(value, repeats=self.num_key_value_groups, dim=2)

        attention_output = self._compute_attention(query, key, value, attention_mask)

        attention_output = self._dropout_layer(attention_output, training=training)

        attention_output = self._output_dense(attention_output)

        if cache is not None:
            return attention_output, cache
        return attention_output

    def _masked_softmax(self, attention_scores, attention_mask=None):
        if attention_mask is not None:
            return self._softmax(attention_scores, attention_mask[:, None, :, :])
        return self._softmax(attention_scores)

    def _compute_attention(self, query, key, value, attention_mask=None):
        query = torch.mul(query, self._inv_norm_factor)

        attention_scores = torch.einsum(self._dot_product_equation, query, key)

        attention_scores = self._masked_softmax(attention_scores, attention_mask)
        attention_scores = attention_scores.to(query.dtype)
        attention_output = torch.einsum(self._combine_equation, attention_scores, value)

        return attention_output


# ---------------------------------------------------------------- llama_decoder.py
def silu(x):
    return x * torch.sigmoid(x)


class LlamaTransformerDecoder(nn.Module):
    def __init__(self, intermediate_dim, num_query_heads, num_key_value_heads, hidden_dim, rope_max_wavelength=10000, rope_scaling_factor=1.0, activation="silu", layer_norm_epsilon=1e-5, dropout=0):
        super().__init__()
        self.intermediate_dim = intermediate_dim
        self.num_query_heads = num_query_heads
        self.num_key_value_heads = num_key_value_heads

        self.rope_max_wavelength = rope_max_wavelength
        self.rope_scaling_factor = rope_scaling_factor

        self.dropout = dropout

        self.activation = silu
        self.layer_norm_epsilon = layer_norm_epsilon

        # build(decoder_sequence_shape)
        self.hidden_dim = hidden_dim

        # Self attention layer.
        self._self_attention_layer = LlamaAttention(
            num_query_heads=self.num_query_heads,
            num_key_value_heads=self.num_key_value_heads,
            hidden_dim=hidden_dim,
            rope_max_wavelength=self.rope_max_wavelength,
            rope_scaling_factor=self.rope_scaling_factor,
            dropout=self.dropout,
        )

        self._self_attention_layernorm = LlamaLayerNorm(hidden_dim, epsilon=self.layer_norm_epsilon)
        self._self_attention_dropout = Dropout(rate=self.dropout)

        # Feedforward layers.
        self._feedforward_intermediate_dense = Dense(hidden_dim, self.intermediate_dim)
        self._feedforward_gate_dense = Dense(hidden_dim, self.intermediate_dim)
        self._feedforward_output_dense = Dense(self.intermediate_dim, hidden_dim)

        self._feedforward_layernorm = LlamaLayerNorm(hidden_dim, epsilon=self.layer_norm_epsilon)

    def forward(self, decoder_sequence, decoder_padding_mask=None, decoder_attention_mask=None, self_attention_cache=None, self_attention_cache_update_index=None, positions=None, training=None):
        self_attention_mask = self._compute_self_attention_mask(
            decoder_sequence=decoder_sequence,
            decoder_padding_mask=decoder_padding_mask,
            decoder_attention_mask=decoder_attention_mask,
            self_attention_cache=self_attention_cache,
            self_attention_cache_update_index=self_attention_cache_update_index,
        )
        residual = decoder_sequence

        x = self._self_attention_layernorm(decoder_sequence)

        # Self attention block.
        x = self._self_attention_layer(
            hidden_states=x,
            attention_mask=self_attention_mask,
            cache=self_attention_cache,
            cache_update_index=self_attention_cache_update_index,
            positions=positions,
        )

        if self_attention_cache is not None:
            x, self_attention_cache = x

        x = self._self_attention_dropout(x, training=training)

        x = x + residual
        residual = x

        x = self._feedforward_layernorm(x)
        gate_output = self._feedforward_gate_dense(x)

        # Note that we run the activation function in full 32-bit
        # precision since this is what `torch.nn.functional.silu`
        # does. Internally, `torch.nn.functional.silu` converts the
        # inputs to float32, computes SiLU, and converts the outputs
        # back to compute dtype.
        # CPU Kernel: https://github.com/pytorch/pytorch/blob/35c493f2cf9b623bfdc7e6b34dc1cb39690a7919/aten/src/ATen/native/cpu/Activation.cpp#L1221-L1235  # noqa: E501
        # CUDA Kernel: https://github.com/pytorch/pytorch/blob/35c493f2cf9b623bfdc7e6b34dc1cb39690a7919/aten/src/ATen/native/cuda/ActivationSiluKernel.cu  # noqa: E501
        compute_dtype = gate_output.dtype
        gate_output = gate_output.to(torch.promote_types(compute_dtype, torch.float32))
        gate_output = self.activation(gate_output)
        gate_output = gate_output.to(compute_dtype)

        x = self._feedforward_intermediate_dense(x)

        x = self._feedforward_output_dense(torch.mul(x, gate_output))

        decoder_output = x + residual

        if self_attention_cache is not None:
            return decoder_output, self_attention_cache
        return decoder_output

    def _compute_self_attention_mask(self, decoder_sequence, decoder_padding_mask, decoder_attention_mask, self_attention_cache, self_attention_cache_update_index):
        decoder_mask = merge_padding_and_attention_mask(decoder_sequence, decoder_padding_mask, decoder_attention_mask)
        batch_size = decoder_sequence.shape[0]
        input_length = output_length = decoder_sequence.shape[1]
        # We need to handle a rectangular causal mask when doing cached
        # decoding. For generative inference, `decoder_sequence` will
        # generally be length 1, and `cache` will be the full generation length.
        if self_attention_cache is not None:
            input_length = self_attention_cache.shape[2]

        cache_update_index = 0 if self_attention_cache_update_index is None else self_attention_cache_update_index

        causal_mask = compute_causal_mask(batch_size, input_length, output_length, cache_update_index)

        return torch.minimum(decoder_mask, causal_mask) if decoder_mask is not None else causal_mask


# ---------------------------------------------------------------- llama_backbone.py
class LlamaBackbone(nn.Module):
    def __init__(self, vocabulary_size, num_layers, num_query_heads, hidden_dim, intermediate_dim, num_key_value_heads, rope_max_wavelength=10000, rope_scaling_factor=1.0, layer_norm_epsilon=1e-6, dropout=0, tie_word_embeddings=False, max_sequence_length=512):
        super().__init__()
        # === Layers ===
        self.token_embedding = ReversibleEmbedding(
            input_dim=vocabulary_size,
            output_dim=hidden_dim,
            tie_weights=tie_word_embeddings,
        )
        self.transformer_layers = nn.ModuleList()
        for i in range(num_layers):
            layer = LlamaTransformerDecoder(
                intermediate_dim=intermediate_dim,
                num_query_heads=num_query_heads,
                num_key_value_heads=num_key_value_heads,
                hidden_dim=hidden_dim,
                rope_max_wavelength=rope_max_wavelength,
                rope_scaling_factor=rope_scaling_factor,
                layer_norm_epsilon=layer_norm_epsilon,
                activation=silu,
                dropout=dropout,
            )
            self.transformer_layers.append(layer)
        self.layer_norm = LlamaLayerNorm(hidden_dim, epsilon=layer_norm_epsilon)

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_query_heads = num_query_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.num_key_value_heads = num_key_value_heads
        self.layer_norm_epsilon = layer_norm_epsilon
        self.max_sequence_length = max_sequence_length

    def forward(self, token_ids, padding_mask=None, positions=None):
        x = self.token_embedding(token_ids)
        for transformer_layer in self.transformer_layers:
            x = transformer_layer(x, decoder_padding_mask=padding_mask, positions=positions)
        sequence_output = self.layer_norm(x)
        return sequence_output


# ---------------------------------------------------------------- llama_causal_lm.py
class LlamaCausalLM(nn.Module):
    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone

    def forward(self, token_ids, padding_mask=None, positions=None):
        x = self.backbone(token_ids, padding_mask=padding_mask, positions=positions)
        return self.backbone.token_embedding(x, reverse=True)

    def call_with_cache(self, token_ids, cache, cache_update_index, padding_mask=None, positions=None):
        """Forward pass of `LlamaCausalLM` with cache.

        `call_with_cache` adds an additional forward pass for the model for
        autoregressive inference. Unlike calling the model directly, this method
        allows caching previous key/value Tensors in multi-head attention layer,
        and avoids recomputing the outputs of seen tokens.
        """
        x = self.backbone.token_embedding(token_ids)
        # Each decoder layer has a cache; we update them separately.
        updated_cache = []
        for i in range(self.backbone.num_layers):
            current_cache = cache[:, i, ...]
            x, next_cache = self.backbone.transformer_layers[i](
                x,
                decoder_padding_mask=padding_mask,
                self_attention_cache=current_cache,
                self_attention_cache_update_index=cache_update_index,
                positions=positions,
            )
            updated_cache.append(next_cache)
        cache = torch.stack(updated_cache, dim=1)
        hidden_states = x = self.backbone.layer_norm(x)
        logits = self.backbone.token_embedding(x, reverse=True)
        return logits, hidden_states, cache

    def _build_cache(self, token_ids):
        """Build an empty cache for use with `call_with_cache()`."""
        batch_size = token_ids.shape[0]
        max_length = self.backbone.max_sequence_length
        num_layers = self.backbone.num_layers
        num_key_value_heads = self.backbone.num_key_value_heads
        head_dim = self.backbone.hidden_dim // self.backbone.num_query_heads
        shape = [batch_size, num_layers, 2, max_length, num_key_value_heads, head_dim]
        return torch.zeros(shape, dtype=self.backbone.token_embedding.embeddings.dtype)


# ---------------------------------------------------------------- the adapter (glue)
def _kv_heads(config):
    return config.n_kv_heads or config.n_heads


def _backbone(config):
    return LlamaBackbone(
        vocabulary_size=config.vocab_size,
        num_layers=config.n_layers,
        num_query_heads=config.n_heads,
        hidden_dim=config.d_model,
        intermediate_dim=config.d_ff,
        num_key_value_heads=_kv_heads(config),
        layer_norm_epsilon=1e-6,
        tie_word_embeddings=False,
        max_sequence_length=config.max_len,
    )


def _decoder(config):
    layer = LlamaTransformerDecoder(
        intermediate_dim=config.d_ff,
        num_query_heads=config.n_heads,
        num_key_value_heads=_kv_heads(config),
        hidden_dim=config.d_model,
        layer_norm_epsilon=1e-6,
    )
    layer.max_sequence_length = config.max_len
    return layer


def _attention(config):
    attn = LlamaAttention(num_query_heads=config.n_heads, num_key_value_heads=_kv_heads(config), hidden_dim=config.d_model)
    attn.max_sequence_length = config.max_len
    return attn


def _layer_map(prefix, mine):
    return {
        f"{prefix}self_attn.q.weight": Param(f"{mine}_self_attention_layer._query_dense.kernel", permute=(1, 2, 0)),
        f"{prefix}self_attn.k.weight": Param(f"{mine}_self_attention_layer._key_dense.kernel", permute=(1, 2, 0)),
        f"{prefix}self_attn.v.weight": Param(f"{mine}_self_attention_layer._value_dense.kernel", permute=(1, 2, 0)),
        f"{prefix}self_attn.o.weight": Param(f"{mine}_self_attention_layer._output_dense.kernel", permute=(2, 0, 1)),
        f"{prefix}norm1.weight": f"{mine}_self_attention_layernorm.scale",
        f"{prefix}ffn.gate.weight": Param(f"{mine}_feedforward_gate_dense.kernel", permute=(1, 0)),
        f"{prefix}ffn.up.weight": Param(f"{mine}_feedforward_intermediate_dense.kernel", permute=(1, 0)),
        f"{prefix}ffn.down.weight": Param(f"{mine}_feedforward_output_dense.kernel", permute=(1, 0)),
        f"{prefix}norm2.weight": f"{mine}_feedforward_layernorm.scale",
    }


def _attention_map(config):
    return {k[len("self_attn."):]: Param(v.name.replace("_self_attention_layer.", ""), permute=v.permute)
            for k, v in _layer_map("", "").items() if k.startswith("self_attn.")}


def _lm_map(config):
    out = {"embedding.weight": "backbone.token_embedding.embeddings",
           "lm_head.weight": Param("backbone.token_embedding.reverse_embeddings", permute=(1, 0)),
           "norm.weight": "backbone.layer_norm.scale"}
    for i in range(config.n_layers):
        out.update(_layer_map(f"layers.{i}.", f"backbone.transformer_layers.{i}."))
    return out


def _padding(key_padding):
    return None if key_padding is None else key_padding.to(torch.int32)


def _positions(positions):
    return None if positions is None else positions.to(torch.float64)


def _attention_forward(attn, x, key_padding=None, positions=None):
    mask = LlamaTransformerDecoder._compute_self_attention_mask(None, x, _padding(key_padding), None, None, None)
    return attn(x, attention_mask=mask, positions=_positions(positions))


def _full_padding(key_padding, batch_size, max_length):
    """The generate() padding mask: over the whole cache, the slots not yet written kept."""
    if key_padding is None:
        return None
    mask = torch.ones(batch_size, max_length, dtype=torch.int32)
    mask[:, : key_padding.shape[1]] = key_padding.to(torch.int32)
    return mask


def _attention_step(attn, cache, x, key_padding=None, positions=None):
    batch_size, n = x.shape[:2]
    head_dim = attn._hidden_dim // attn.num_query_heads
    if cache is None:
        kv = torch.zeros(batch_size, 2, attn.max_sequence_length, attn.num_key_value_heads, head_dim, dtype=x.dtype)
        index = 0
    else:
        kv, index = cache
    padding = _full_padding(key_padding, batch_size, attn.max_sequence_length)
    decoder_mask = merge_padding_and_attention_mask(x, padding, None)
    causal_mask = compute_causal_mask(batch_size, attn.max_sequence_length, n, index)
    mask = torch.minimum(decoder_mask, causal_mask) if decoder_mask is not None else causal_mask
    out, kv = attn(x, attention_mask=mask, cache=kv, cache_update_index=index, positions=_positions(positions))
    return out, (kv, index + n)


def _block_forward(layer, x, key_padding=None, positions=None):
    return layer(x, decoder_padding_mask=_padding(key_padding), positions=_positions(positions))


def _block_step(layer, cache, x, key_padding=None, positions=None):
    batch_size, n = x.shape[:2]
    attn = layer._self_attention_layer
    head_dim = attn._hidden_dim // attn.num_query_heads
    if cache is None:
        kv = torch.zeros(batch_size, 2, layer.max_sequence_length, attn.num_key_value_heads, head_dim, dtype=x.dtype)
        index = 0
    else:
        kv, index = cache
    out, kv = layer(x, decoder_padding_mask=_full_padding(key_padding, batch_size, layer.max_sequence_length),
                    self_attention_cache=kv, self_attention_cache_update_index=index, positions=_positions(positions))
    return out, (kv, index + n)


def _lm_forward(model, ids, key_padding=None, positions=None):
    return model(ids, padding_mask=_padding(key_padding), positions=_positions(positions))


def _lm_step(model, cache, ids, key_padding=None, positions=None):
    batch_size, n = ids.shape[:2]
    if cache is None:
        kv, index = model._build_cache(ids), 0
    else:
        kv, index = cache
    logits, _, kv = model.call_with_cache(
        ids, kv, index,
        padding_mask=_full_padding(key_padding, batch_size, model.backbone.max_sequence_length),
        positions=_positions(positions),
    )
    return logits, (kv, index + n)


_CONVENTIONS = Conventions(
    norm_placement="pre", norm_kind="rms_norm", eps=1e-6, positions="rope", rope_layout="half_split",
    ffn_kind="gated", gate_activation="silu", embedding_scale="none", fully_masked_rows="undefined",
)
_NO_BIAS = {"attention_bias": False, "ffn_bias": False}
_SPACE = ConfigSpace(split_heads=True, biases={"attention": False, "ffn": False})

adapter = TorchModuleAdapter("kerashub-llama", [
    TorchEntry(
        "rms_norm",
        make=lambda config: LlamaLayerNorm(config.d_model, epsilon=1e-6),
        forward=lambda norm, x: norm(x),
        param_map={"weight": "scale"},
        conventions=Conventions(norm_kind="rms_norm", eps=1e-6),
    ),
    TorchEntry(
        "causal_self_attention",
        make=_attention,
        forward=_attention_forward,
        step=_attention_step,
        param_map=_attention_map,
        conventions=_CONVENTIONS,
        config=_NO_BIAS,
        supports=_SPACE,
        derives_positions=True,
    ),
    TorchEntry(
        "decoder_block",
        make=_decoder,
        forward=_block_forward,
        step=_block_step,
        param_map=lambda config: _layer_map("", ""),
        conventions=_CONVENTIONS,
        config=_NO_BIAS,
        supports=_SPACE,
        derives_positions=True,
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: LlamaCausalLM(_backbone(config)),
        forward=_lm_forward,
        step=_lm_step,
        param_map=_lm_map,
        conventions=_CONVENTIONS,
        config={**_NO_BIAS, "tie_weights": False},
        supports=ConfigSpace(split_heads=True, biases={"attention": False, "ffn": False}, tied=False),
        derives_positions=True,
    ),
])
