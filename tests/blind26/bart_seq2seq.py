# fmt: off
# ruff: noqa
"""BART's encoder and decoder as transformers' ``modeling_bart.py`` (the 4.3x releases, eager
attention) writes them, ported to plain torch for the twenty-sixth blind set.

``BartAttention`` (``q_proj`` output multiplied by ``self.scaling`` before the product,
``_shape`` to ``[B, H, T, d]``, ``proj_shape`` ``(bsz * num_heads, -1, head_dim)`` and
``torch.bmm``, the additive ``[B, 1, tgt, src]`` mask added in a ``view(bsz, num_heads, ...)``,
softmax, dropout, ``bmm`` with the values, ``view``/``transpose``/``reshape`` back, ``out_proj``;
``key_value_states`` for cross-attention); ``BartEncoderLayer`` and ``BartDecoderLayer`` (post-LN:
``self_attn_layer_norm``, ``encoder_attn_layer_norm``, ``final_layer_norm``; ``fc1``, GELU,
``fc2``; the float16 clamp); ``_expand_mask`` (``1 - mask`` filled with the dtype's minimum) and
``_make_causal_mask`` (``masked_fill_(mask_cond < (mask_cond + 1).view(...), 0)``), combined by
addition as ``_prepare_decoder_attention_mask`` does; the encoder's and decoder's layer loops.
The token embeddings, the offset-2 learned positions and ``layernorm_embedding`` are not part
of the subjects (SPEC's stacks start at the first layer; see PROTOCOL.md).
"""

import math
from typing import Optional, Tuple

import torch
from torch import nn


class BartConfig:
    model_type = "bart"

    def __init__(self, d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
                 decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096,
                 activation_function="gelu", dropout=0.1, attention_dropout=0.1, activation_dropout=0.1,
                 encoder_layerdrop=0.0, decoder_layerdrop=0.0):
        self.d_model = d_model
        self.encoder_layers = encoder_layers
        self.decoder_layers = decoder_layers
        self.encoder_attention_heads = encoder_attention_heads
        self.decoder_attention_heads = decoder_attention_heads
        self.encoder_ffn_dim = encoder_ffn_dim
        self.decoder_ffn_dim = decoder_ffn_dim
        self.activation_function = activation_function
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.encoder_layerdrop = encoder_layerdrop
        self.decoder_layerdrop = decoder_layerdrop


class GELUActivation(nn.Module):
    """Original Implementation of the GELU activation function in Google BERT repo when initially created."""

    def __init__(self, use_gelu_python: bool = False):
        super().__init__()
        if use_gelu_python:
            self.act = self._gelu_python
        else:
            self.act = nn.functional.gelu

    def _gelu_python(self, input):
        return input * 0.5 * (1.0 + torch.erf(input / math.sqrt(2.0)))

    def forward(self, input):
        return self.act(input)


ACT2FN = {"gelu": GELUActivation, "gelu_python": lambda: GELUActivation(use_gelu_python=True), "relu": nn.ReLU}


def _at_least_float32(dtype):
    # the softmax is formed in float32 or better (transformers forms it in the input dtype)
    return torch.float64 if dtype == torch.float64 else torch.float32


def _make_causal_mask(input_ids_shape: torch.Size, dtype: torch.dtype, device: torch.device, past_key_values_length: int = 0):
    """
    Make causal mask used for bi-directional self-attention.
    """
    bsz, tgt_len = input_ids_shape
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, dtype=dtype, device=device)
    mask_cond = torch.arange(mask.size(-1), device=device)
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)

    if past_key_values_length > 0:
        mask = torch.cat([torch.zeros(tgt_len, past_key_values_length, dtype=dtype, device=device), mask], dim=-1)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)


def _expand_mask(mask: torch.Tensor, dtype: torch.dtype, tgt_len: Optional[int] = None):
    """
    Expands attention_mask from `[bsz, seq_len]` to `[bsz, 1, tgt_seq_len, src_seq_len]`.
    """
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len

    expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)

    inverted_mask = 1.0 - expanded_mask

    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


class BartAttention(nn.Module):
    """Multi-headed attention from 'Attention Is All You Need' paper"""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, is_decoder: bool = False, bias: bool = True):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.head_dim = embed_dim // num_heads

        if (self.head_dim * num_heads) != self.embed_dim:
            raise ValueError(
                f"embed_dim must be divisible by num_heads (got `embed_dim`: {self.embed_dim}"
                f" and `num_heads`: {num_heads})."
            )
        self.scaling = self.head_dim**-0.5
        self.is_decoder = is_decoder

        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _shape(self, tensor: torch.Tensor, seq_len: int, bsz: int):
        return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        layer_head_mask: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Input shape: Batch x Time x Channel"""

        # if key_value_states are provided this layer is used as a cross-attention layer
        # for the decoder
        is_cross_attention = key_value_states is not None

        bsz, tgt_len, _ = hidden_states.size()

        # get query proj
        query_states = self.q_proj(hidden_states) * self.scaling
        # get key, value proj
        if is_cross_attention:
            # cross_attentions
            key_states = self._shape(self.k_proj(key_value_states), -1, bsz)
            value_states = self._shape(self.v_proj(key_value_states), -1, bsz)
        else:
            # self_attention
            key_states = self._shape(self.k_proj(hidden_states), -1, bsz)
            value_states = self._shape(self.v_proj(hidden_states), -1, bsz)

        proj_shape = (bsz * self.num_heads, -1, self.head_dim)
        query_states = self._shape(query_states, tgt_len, bsz).view(*proj_shape)
        key_states = key_states.reshape(*proj_shape)
        value_states = value_states.reshape(*proj_shape)

        src_len = key_states.size(1)
        attn_weights = torch.bmm(query_states, key_states.transpose(1, 2))

        if attn_weights.size() != (bsz * self.num_heads, tgt_len, src_len):
            raise ValueError(
                f"Attention weights should be of size {(bsz * self.num_heads, tgt_len, src_len)}, but is"
                f" {attn_weights.size()}"
            )

        if attention_mask is not None:
            if attention_mask.size() != (bsz, 1, tgt_len, src_len):
                raise ValueError(
                    f"Attention mask should be of size {(bsz, 1, tgt_len, src_len)}, but is {attention_mask.size()}"
                )
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len) + attention_mask
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)

        attn_weights = nn.functional.softmax(attn_weights.to(_at_least_float32(attn_weights.dtype)), dim=-1).to(value_states.dtype)

        if layer_head_mask is not None:
            attn_weights = layer_head_mask.view(1, -1, 1, 1) * attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)

        attn_probs = nn.functional.dropout(attn_weights, p=self.dropout, training=self.training)

        attn_output = torch.bmm(attn_probs, value_states)

        if attn_output.size() != (bsz * self.num_heads, tgt_len, self.head_dim):
            raise ValueError(
                f"`attn_output` should be of size {(bsz * self.num_heads, tgt_len, self.head_dim)}, but is"
                f" {attn_output.size()}"
            )

        attn_output = attn_output.view(bsz, self.num_heads, tgt_len, self.head_dim)
        attn_output = attn_output.transpose(1, 2)

        # Use the `embed_dim` from the config (stored in the class) rather than `hidden_state` because `attn_output` can be
        # partitioned across GPUs when using tensor-parallelism.
        attn_output = attn_output.reshape(bsz, tgt_len, self.embed_dim)

        attn_output = self.out_proj(attn_output)

        return attn_output, attn_weights


class BartEncoderLayer(nn.Module):
    def __init__(self, config: BartConfig):
        super().__init__()
        self.embed_dim = config.d_model
        self.self_attn = BartAttention(
            embed_dim=self.embed_dim,
            num_heads=config.encoder_attention_heads,
            dropout=config.attention_dropout,
        )
        self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self.dropout = config.dropout
        self.activation_fn = ACT2FN[config.activation_function]()
        self.activation_dropout = config.activation_dropout
        self.fc1 = nn.Linear(self.embed_dim, config.encoder_ffn_dim)
        self.fc2 = nn.Linear(config.encoder_ffn_dim, self.embed_dim)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim)

    def forward(
        self,
        hidden_states: torch.FloatTensor,
        attention_mask: torch.FloatTensor,
        layer_head_mask: Optional[torch.FloatTensor] = None,
    ) -> Tuple[torch.FloatTensor]:
        residual = hidden_states
        hidden_states, attn_weights = self.self_attn(
            hidden_states=hidden_states,
            attention_mask=attention_mask,
            layer_head_mask=layer_head_mask,
        )
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states
        hidden_states = self.self_attn_layer_norm(hidden_states)

        residual = hidden_states  # encoder: feed-forward residual
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = nn.functional.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        hidden_states = self.fc2(hidden_states)
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)  # encoder: fc2 dropout
        hidden_states = residual + hidden_states  # encoder: feed-forward add
        hidden_states = self.final_layer_norm(hidden_states)  # encoder: final norm

        if hidden_states.dtype == torch.float16 and (
            torch.isinf(hidden_states).any() or torch.isnan(hidden_states).any()
        ):
            clamp_value = torch.finfo(hidden_states.dtype).max - 1000
            hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)

        outputs = (hidden_states,)

        return outputs


class BartDecoderLayer(nn.Module):
    def __init__(self, config: BartConfig):
        super().__init__()
        self.embed_dim = config.d_model

        self.self_attn = BartAttention(
            embed_dim=self.embed_dim,
            num_heads=config.decoder_attention_heads,
            dropout=config.attention_dropout,
            is_decoder=True,
        )
        self.dropout = config.dropout
        self.activation_fn = ACT2FN[config.activation_function]()
        self.activation_dropout = config.activation_dropout

        self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self.encoder_attn = BartAttention(
            self.embed_dim,
            config.decoder_attention_heads,
            dropout=config.attention_dropout,
            is_decoder=True,
        )
        self.encoder_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self.fc1 = nn.Linear(self.embed_dim, config.decoder_ffn_dim)
        self.fc2 = nn.Linear(config.decoder_ffn_dim, self.embed_dim)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        encoder_hidden_states: Optional[torch.Tensor] = None,
        encoder_attention_mask: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.FloatTensor]:
        residual = hidden_states  # decoder: self-attention residual

        # Self Attention
        hidden_states, self_attn_weights = self.self_attn(
            hidden_states=hidden_states,
            attention_mask=attention_mask,
        )
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)  # decoder: self-attention dropout
        hidden_states = residual + hidden_states  # decoder: self-attention add
        hidden_states = self.self_attn_layer_norm(hidden_states)  # decoder: self-attention norm

        # Cross-Attention Block
        if encoder_hidden_states is not None:
            residual = hidden_states  # decoder: cross-attention residual

            hidden_states, cross_attn_weights = self.encoder_attn(
                hidden_states=hidden_states,
                key_value_states=encoder_hidden_states,
                attention_mask=encoder_attention_mask,
            )
            hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)  # decoder: cross-attention dropout
            hidden_states = residual + hidden_states  # decoder: cross-attention add
            hidden_states = self.encoder_attn_layer_norm(hidden_states)

        # Fully Connected
        residual = hidden_states  # decoder: feed-forward residual
        hidden_states = self.activation_fn(self.fc1(hidden_states))  # decoder: fc1 and activation
        hidden_states = nn.functional.dropout(hidden_states, p=self.activation_dropout, training=self.training)  # decoder: activation dropout
        hidden_states = self.fc2(hidden_states)  # decoder: fc2
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)  # decoder: fc2 dropout
        hidden_states = residual + hidden_states  # decoder: feed-forward add
        hidden_states = self.final_layer_norm(hidden_states)  # decoder: final norm

        outputs = (hidden_states,)

        return outputs


class BartEncoder(nn.Module):
    """The layers of ``BartEncoder`` (after ``embed_tokens``, ``embed_positions`` and ``layernorm_embedding``)."""

    def __init__(self, config: BartConfig):
        super().__init__()
        self.dropout = config.dropout
        self.layerdrop = config.encoder_layerdrop
        self.layers = nn.ModuleList([BartEncoderLayer(config) for _ in range(config.encoder_layers)])

    def forward(self, inputs_embeds, attention_mask=None):
        hidden_states = nn.functional.dropout(inputs_embeds, p=self.dropout, training=self.training)

        # expand attention_mask
        if attention_mask is not None and attention_mask.dim() == 2:
            # [bsz, seq_len] -> [bsz, 1, tgt_seq_len, src_seq_len]
            attention_mask = _expand_mask(attention_mask, inputs_embeds.dtype)

        for idx, encoder_layer in enumerate(self.layers):
            # add LayerDrop (see https://arxiv.org/abs/1909.11556 for description)
            to_drop = False
            if self.training:
                dropout_probability = torch.rand([])
                if dropout_probability < self.layerdrop:  # skip the layer
                    to_drop = True

            if to_drop:
                layer_outputs = (None, None)
            else:
                layer_outputs = encoder_layer(hidden_states, attention_mask)

                hidden_states = layer_outputs[0]

        return hidden_states


class BartDecoder(nn.Module):
    """The layers of ``BartDecoder`` (after its embeddings and ``layernorm_embedding``)."""

    def __init__(self, config: BartConfig):
        super().__init__()
        self.dropout = config.dropout
        self.layerdrop = config.decoder_layerdrop
        self.layers = nn.ModuleList([BartDecoderLayer(config) for _ in range(config.decoder_layers)])

    def _prepare_decoder_attention_mask(self, attention_mask, input_shape, inputs_embeds, past_key_values_length, causal=True):
        # create causal mask
        # [bsz, seq_len] -> [bsz, 1, tgt_seq_len, src_seq_len]
        combined_attention_mask = None
        if causal and input_shape[-1] > 1:
            combined_attention_mask = _make_causal_mask(
                input_shape,
                inputs_embeds.dtype,
                device=inputs_embeds.device,
                past_key_values_length=past_key_values_length,
            )

        if attention_mask is not None:
            # [bsz, seq_len] -> [bsz, 1, tgt_seq_len, src_seq_len]
            expanded_attn_mask = _expand_mask(attention_mask, inputs_embeds.dtype, tgt_len=input_shape[-1]).to(
                inputs_embeds.device
            )
            combined_attention_mask = (
                expanded_attn_mask if combined_attention_mask is None else expanded_attn_mask + combined_attention_mask
            )

        return combined_attention_mask

    def forward(self, inputs_embeds, encoder_hidden_states, attention_mask=None, encoder_attention_mask=None, causal=True):
        input_shape = inputs_embeds.size()[:-1]
        attention_mask = self._prepare_decoder_attention_mask(attention_mask, input_shape, inputs_embeds, 0, causal)

        # expand encoder attention mask
        if encoder_hidden_states is not None and encoder_attention_mask is not None:
            # [bsz, seq_len] -> [bsz, 1, tgt_seq_len, src_seq_len]
            encoder_attention_mask = _expand_mask(encoder_attention_mask, inputs_embeds.dtype, tgt_len=input_shape[-1])

        hidden_states = nn.functional.dropout(inputs_embeds, p=self.dropout, training=self.training)

        for idx, decoder_layer in enumerate(self.layers):
            # add LayerDrop (see https://arxiv.org/abs/1909.11556 for description)
            if self.training:
                dropout_probability = torch.rand([])
                if dropout_probability < self.layerdrop:
                    continue

            layer_outputs = decoder_layer(
                hidden_states,
                attention_mask=attention_mask,
                encoder_hidden_states=encoder_hidden_states,
                encoder_attention_mask=encoder_attention_mask,
            )
            hidden_states = layer_outputs[0]

        return hidden_states


# ---- the adapter (glue: not BART's code) --------------------------------------------------

from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter  # noqa: E402
from tck.reference import Conventions  # noqa: E402


def _bart_config(config):
    return BartConfig(
        d_model=config.d_model, encoder_layers=config.n_layers, decoder_layers=config.n_decoder_layers,
        encoder_attention_heads=config.n_heads, decoder_attention_heads=config.n_heads,
        encoder_ffn_dim=config.d_ff, decoder_ffn_dim=config.d_ff,
    )


def _self_mask(x, key_padding=None, attn_mask=None, causal=False):
    """The encoder subjects' additive [B, 1, L, L] mask: padding by _expand_mask, the causal
    flag by _make_causal_mask, an attention keep-mask the same way; added as BART adds them."""
    bsz, length = x.shape[:2]
    mask = None
    if key_padding is not None:
        mask = _expand_mask(torch.as_tensor(key_padding).to(x.dtype), x.dtype)
    if causal is not None and bool(causal):
        causal_mask = _make_causal_mask((bsz, length), x.dtype, x.device)
        mask = causal_mask if mask is None else mask + causal_mask
    if attn_mask is not None:
        keep = torch.as_tensor(attn_mask).to(torch.bool)
        extra = torch.zeros(keep.shape, dtype=x.dtype).masked_fill(~keep, torch.finfo(x.dtype).min)
        extra = extra.expand(bsz, 1, length, length) if extra.dim() <= 3 else extra
        mask = extra if mask is None else mask + extra
    return mask


def _encoder_layer_forward(layer, x, key_padding=None, attn_mask=None, causal=False):
    return layer(x, _self_mask(x, key_padding, attn_mask, causal))[0]


def _encoder_forward(encoder, x, key_padding=None, attn_mask=None, causal=False):
    return encoder(x, _self_mask(x, key_padding, attn_mask, causal))


def _decoder_layer_forward(layer, x, memory, key_padding=None, memory_key_padding=None, causal=False):
    bsz, length = x.shape[:2]
    mask = None
    if causal is not None and bool(causal):
        mask = _make_causal_mask((bsz, length), x.dtype, x.device)
    if key_padding is not None:
        expanded = _expand_mask(torch.as_tensor(key_padding).to(x.dtype), x.dtype, tgt_len=length)
        mask = expanded if mask is None else expanded + mask
    memory_mask = None
    if memory_key_padding is not None:
        memory_mask = _expand_mask(torch.as_tensor(memory_key_padding).to(x.dtype), x.dtype, tgt_len=length)
    return layer(x, attention_mask=mask, encoder_hidden_states=memory, encoder_attention_mask=memory_mask)[0]


def _decoder_forward(decoder, x, memory, key_padding=None, memory_key_padding=None, causal=False):
    pad = None if key_padding is None else torch.as_tensor(key_padding).to(x.dtype)
    mem_pad = None if memory_key_padding is None else torch.as_tensor(memory_key_padding).to(x.dtype)
    return decoder(x, memory, attention_mask=pad, encoder_attention_mask=mem_pad, causal=causal is not None and bool(causal))


def _attn_map(canon, ours):
    out = {}
    for c, m in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "out_proj")):
        out[f"{canon}.{c}.weight"] = f"{ours}.{m}.weight"
        out[f"{canon}.{c}.bias"] = f"{ours}.{m}.bias"
    return out


def _norm_ffn_map(pairs, prefix=""):
    out = {}
    for canon, ours in pairs:
        out[f"{prefix}{canon}.weight"] = f"{prefix}{ours}.weight"
        out[f"{prefix}{canon}.bias"] = f"{prefix}{ours}.bias"
    return out


def _encoder_layer_map(prefix=""):
    return _attn_map(f"{prefix}self_attn", f"{prefix}self_attn") | _norm_ffn_map(
        (("norm1", "self_attn_layer_norm"), ("ffn.fc1", "fc1"), ("ffn.fc2", "fc2"), ("norm2", "final_layer_norm")), prefix)


def _decoder_layer_map(prefix=""):
    return (_attn_map(f"{prefix}self_attn", f"{prefix}self_attn") | _attn_map(f"{prefix}cross_attn", f"{prefix}encoder_attn")
            | _norm_ffn_map((("norm1", "self_attn_layer_norm"), ("norm2", "encoder_attn_layer_norm"), ("ffn.fc1", "fc1"),
                             ("ffn.fc2", "fc2"), ("norm3", "final_layer_norm")), prefix))


def _encoder_map(config):
    out = {}
    for i in range(config.n_layers):
        out |= _encoder_layer_map(f"layers.{i}.")
    return out


def _decoder_map(config):
    out = {}
    for i in range(config.n_decoder_layers):
        out |= _decoder_layer_map(f"layers.{i}.")
    return out


_BART = dict(norm_placement="post", activation="gelu", fully_masked_rows="undefined")
_SPACE = ConfigSpace(split_heads=True)

adapter = TorchModuleAdapter("bart-seq2seq", [
    TorchEntry("encoder_layer", make=lambda config: BartEncoderLayer(_bart_config(config)),
               forward=_encoder_layer_forward, param_map=_encoder_layer_map(),
               conventions=Conventions(**_BART), supports=_SPACE),
    TorchEntry("encoder", make=lambda config: BartEncoder(_bart_config(config)),
               forward=_encoder_forward, param_map=_encoder_map,
               conventions=Conventions(**_BART), supports=_SPACE),
    TorchEntry("decoder_layer", make=lambda config: BartDecoderLayer(_bart_config(config)),
               forward=_decoder_layer_forward, param_map=_decoder_layer_map(),
               conventions=Conventions(**_BART), supports=_SPACE),
    TorchEntry("decoder", make=lambda config: BartDecoder(_bart_config(config)),
               forward=_decoder_forward, param_map=_decoder_map,
               conventions=Conventions(**_BART), supports=_SPACE),
])
