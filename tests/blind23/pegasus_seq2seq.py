# fmt: off
# ruff: noqa
"""The encoder-decoder of transformers' Pegasus (``models/pegasus/modeling_pegasus.py``), in its
own style, eager attention, without the library: ``PegasusSinusoidalPositionalEmbedding`` (sines
in the first half of the columns, cosines in the second), ``scale_embedding=True``
(``embed_scale = sqrt(d_model)``), pre-LN layers (``self_attn_layer_norm``,
``encoder_attn_layer_norm``, ``final_layer_norm``) with a final ``layer_norm`` closing the
encoder and the decoder, ``PegasusAttention`` with separate ``q_proj``/``k_proj``/``v_proj``/
``out_proj`` (biases) and the query scaled by ``head_dim ** -0.5`` before the matmul, heads
folded into the batch for ``torch.bmm``, a ReLU FFN (``fc1``, ``fc2``), the causal and padding
masks as additive ``finfo.min`` biases (``_make_causal_mask``, ``_expand_mask``), the shared
embedding tied to ``lm_head`` and ``final_logits_bias`` (a zero buffer) added to the logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class PegasusConfig:
    vocab_size: int = 40
    max_position_embeddings: int = 512
    d_model: int = 32
    encoder_layers: int = 2
    decoder_layers: int = 2
    encoder_attention_heads: int = 4
    decoder_attention_heads: int = 4
    encoder_ffn_dim: int = 64
    decoder_ffn_dim: int = 64
    activation_function: str = "relu"
    dropout: float = 0.1
    attention_dropout: float = 0.1
    activation_dropout: float = 0.1
    scale_embedding: bool = True
    pad_token_id: int = 0


ACT2FN = {"relu": nn.ReLU(), "gelu": nn.GELU()}


class PegasusSinusoidalPositionalEmbedding(nn.Module):
    """This module produces sinusoidal positional embeddings of any length."""

    def __init__(self, num_positions, embedding_dim):
        super().__init__()
        self.register_buffer("weight", self._init_weight(num_positions, embedding_dim), persistent=False)

    @staticmethod
    def _init_weight(n_pos, dim):
        """Identical to the XLM create_sinusoidal_embeddings except features are not interleaved.
        The cos features are in the 2nd half of the vector. [dim // 2:]"""
        out = torch.empty(n_pos, dim, dtype=torch.float64)
        position_enc = np.array(
            [[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)]
        )
        sentinel = dim // 2 if dim % 2 == 0 else (dim // 2) + 1
        out[:, 0:sentinel] = torch.tensor(np.sin(position_enc[:, 0::2]), dtype=torch.float64)
        out[:, sentinel:] = torch.tensor(np.cos(position_enc[:, 1::2]), dtype=torch.float64)
        return out

    def forward(self, input_ids_shape, past_key_values_length=0):
        """`input_ids_shape` is expected to be [bsz x seqlen]."""
        bsz, seq_len = input_ids_shape[:2]
        positions = torch.arange(past_key_values_length, past_key_values_length + seq_len, dtype=torch.long)
        return F.embedding(positions, self.weight)


def _make_causal_mask(input_ids_shape, dtype, past_key_values_length=0):
    """Make causal mask used for uni-directional self-attention."""
    bsz, tgt_len = input_ids_shape
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, dtype=dtype)
    mask_cond = torch.arange(mask.size(-1))
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)


def _expand_mask(mask, dtype, tgt_len=None):
    """Expands attention_mask from `[bsz, seq_len]` to `[bsz, 1, tgt_seq_len, src_seq_len]`."""
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len
    expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted_mask = 1.0 - expanded_mask
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


def _prepare_decoder_attention_mask(attention_mask, input_shape, dtype):
    """The causal mask, combined with the expanded padding mask when one is given."""
    combined_attention_mask = _make_causal_mask(input_shape, dtype)
    if attention_mask is not None:
        expanded_attn_mask = _expand_mask(attention_mask, dtype, tgt_len=input_shape[-1])
        combined_attention_mask = combined_attention_mask.masked_fill(expanded_attn_mask.bool(), torch.finfo(dtype).min)
    return combined_attention_mask


class PegasusAttention(nn.Module):
    """Multi-headed attention from 'Attention Is All You Need' paper"""

    def __init__(self, embed_dim, num_heads, dropout=0.0, is_decoder=False, bias=True):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.head_dim = embed_dim // num_heads
        if (self.head_dim * num_heads) != self.embed_dim:
            raise ValueError(f"embed_dim must be divisible by num_heads (got `embed_dim`: {self.embed_dim} and `num_heads`: {num_heads}).")
        self.scaling = self.head_dim ** -0.5
        self.is_decoder = is_decoder
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _shape(self, tensor, seq_len, bsz):
        return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(self, hidden_states, key_value_states=None, attention_mask=None, value_states=None):
        """Input shape: Batch x Time x Channel"""
        is_cross_attention = key_value_states is not None
        bsz, tgt_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states) * self.scaling
        kv_input = key_value_states if is_cross_attention else hidden_states
        v_input = kv_input if value_states is None else value_states
        key_states = self._shape(self.k_proj(kv_input), -1, bsz)
        value_states = self._shape(self.v_proj(v_input), -1, bsz)
        proj_shape = (bsz * self.num_heads, -1, self.head_dim)
        query_states = self._shape(query_states, tgt_len, bsz).view(*proj_shape)
        key_states = key_states.reshape(*proj_shape)
        value_states = value_states.reshape(*proj_shape)
        src_len = key_states.size(1)
        attn_weights = torch.bmm(query_states, key_states.transpose(1, 2))
        if attention_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len) + attention_mask
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        upcast = torch.promote_types(attn_weights.dtype, torch.float32)
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=upcast).to(value_states.dtype)
        attn_probs = F.dropout(attn_weights, p=self.dropout, training=self.training)
        attn_output = torch.bmm(attn_probs, value_states)
        attn_output = attn_output.view(bsz, self.num_heads, tgt_len, self.head_dim)
        attn_output = attn_output.transpose(1, 2)
        attn_output = attn_output.reshape(bsz, tgt_len, self.embed_dim)
        return self.out_proj(attn_output)


class PegasusEncoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_dim = config.d_model
        self.self_attn = PegasusAttention(self.embed_dim, config.encoder_attention_heads, dropout=config.attention_dropout)
        self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self.dropout = config.dropout
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout
        self.fc1 = nn.Linear(self.embed_dim, config.encoder_ffn_dim)
        self.fc2 = nn.Linear(config.encoder_ffn_dim, self.embed_dim)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim)

    def forward(self, hidden_states, attention_mask):
        residual = hidden_states
        hidden_states = self.self_attn_layer_norm(hidden_states)  # encoder self-attention block
        hidden_states = self.self_attn(hidden_states=hidden_states, attention_mask=attention_mask)
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = F.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        hidden_states = self.fc2(hidden_states)
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states
        return hidden_states


class PegasusDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_dim = config.d_model
        self.self_attn = PegasusAttention(self.embed_dim, config.decoder_attention_heads, dropout=config.attention_dropout, is_decoder=True)
        self.dropout = config.dropout
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout
        self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self.encoder_attn = PegasusAttention(self.embed_dim, config.decoder_attention_heads, dropout=config.attention_dropout, is_decoder=True)
        self.encoder_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self.fc1 = nn.Linear(self.embed_dim, config.decoder_ffn_dim)
        self.fc2 = nn.Linear(config.decoder_ffn_dim, self.embed_dim)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim)

    def forward(self, hidden_states, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None):
        residual = hidden_states
        hidden_states = self.self_attn_layer_norm(hidden_states)
        hidden_states = self.self_attn(hidden_states=hidden_states, attention_mask=attention_mask)
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.encoder_attn_layer_norm(hidden_states)
        hidden_states = self.encoder_attn(hidden_states=hidden_states, key_value_states=encoder_hidden_states, attention_mask=encoder_attention_mask)
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.final_layer_norm(hidden_states)  # decoder feed-forward block
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = F.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        hidden_states = self.fc2(hidden_states)
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states
        return hidden_states


class PegasusEncoder(nn.Module):
    def __init__(self, config, embed_tokens=None):
        super().__init__()
        self.dropout = config.dropout
        embed_dim = config.d_model
        self.padding_idx = config.pad_token_id
        self.max_source_positions = config.max_position_embeddings
        self.embed_scale = math.sqrt(embed_dim) if config.scale_embedding else 1.0
        self.embed_tokens = embed_tokens if embed_tokens is not None else nn.Embedding(config.vocab_size, embed_dim, self.padding_idx)
        self.embed_positions = PegasusSinusoidalPositionalEmbedding(config.max_position_embeddings, embed_dim)
        self.layers = nn.ModuleList([PegasusEncoderLayer(config) for _ in range(config.encoder_layers)])
        self.layer_norm = nn.LayerNorm(config.d_model)

    def forward(self, input_ids, attention_mask=None):
        input_shape = input_ids.size()
        inputs_embeds = self.embed_tokens(input_ids) * self.embed_scale
        embed_pos = self.embed_positions(input_shape).to(inputs_embeds.dtype)
        hidden_states = inputs_embeds + embed_pos
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)
        if attention_mask is not None:
            attention_mask = _expand_mask(attention_mask, inputs_embeds.dtype)
        return self.run_layers(hidden_states, attention_mask)

    def run_layers(self, hidden_states, attention_mask):
        for encoder_layer in self.layers:
            hidden_states = encoder_layer(hidden_states, attention_mask)
        hidden_states = self.layer_norm(hidden_states)  # the encoder's final layer_norm
        return hidden_states


class PegasusDecoder(nn.Module):
    def __init__(self, config, embed_tokens=None):
        super().__init__()
        self.dropout = config.dropout
        self.padding_idx = config.pad_token_id
        self.max_target_positions = config.max_position_embeddings
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_tokens = embed_tokens if embed_tokens is not None else nn.Embedding(config.vocab_size, config.d_model, self.padding_idx)
        self.embed_positions = PegasusSinusoidalPositionalEmbedding(config.max_position_embeddings, config.d_model)
        self.layers = nn.ModuleList([PegasusDecoderLayer(config) for _ in range(config.decoder_layers)])
        self.layer_norm = nn.LayerNorm(config.d_model)

    def forward(self, input_ids, encoder_hidden_states, attention_mask=None, encoder_attention_mask=None):
        input_shape = input_ids.size()
        inputs_embeds = self.embed_tokens(input_ids) * self.embed_scale
        attention_mask = _prepare_decoder_attention_mask(attention_mask, input_shape, inputs_embeds.dtype)
        if encoder_attention_mask is not None:
            encoder_attention_mask = _expand_mask(encoder_attention_mask, inputs_embeds.dtype, tgt_len=input_shape[-1])
        positions = self.embed_positions(input_shape).to(inputs_embeds.dtype)
        hidden_states = inputs_embeds + positions
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)
        return self.run_layers(hidden_states, attention_mask, encoder_hidden_states, encoder_attention_mask)

    def run_layers(self, hidden_states, attention_mask, encoder_hidden_states, encoder_attention_mask):
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, attention_mask=attention_mask, encoder_hidden_states=encoder_hidden_states, encoder_attention_mask=encoder_attention_mask)
        hidden_states = self.layer_norm(hidden_states)
        return hidden_states


class PegasusForConditionalGeneration(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        padding_idx, vocab_size = config.pad_token_id, config.vocab_size
        self.shared = nn.Embedding(vocab_size, config.d_model, padding_idx)
        self.encoder = PegasusEncoder(config, self.shared)
        self.decoder = PegasusDecoder(config, self.shared)
        self.register_buffer("final_logits_bias", torch.zeros((1, vocab_size)))
        self.lm_head = nn.Linear(config.d_model, vocab_size, bias=False)
        self.lm_head.weight = self.shared.weight

    def forward(self, input_ids, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None):
        encoder_outputs = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids, encoder_hidden_states=encoder_outputs,
            attention_mask=decoder_attention_mask, encoder_attention_mask=attention_mask,
        )
        lm_logits = self.lm_head(decoder_outputs) + self.final_logits_bias.to(decoder_outputs.dtype)
        return lm_logits


# ---- the adapter

from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def pegasus_config(config):
    return PegasusConfig(
        vocab_size=config.vocab_size, max_position_embeddings=config.max_len, d_model=config.d_model,
        encoder_layers=config.n_layers, decoder_layers=config.n_decoder_layers,
        encoder_attention_heads=config.n_heads, decoder_attention_heads=config.n_heads,
        encoder_ffn_dim=config.d_ff, decoder_ffn_dim=config.d_ff, pad_token_id=config.padding_idx,
    )


def _t(x):
    return torch.as_tensor(x)


def _keep(key_padding):
    return None if key_padding is None else _t(key_padding).to(torch.long)


def make_encoder(config):
    encoder = PegasusEncoder(pegasus_config(config))
    del encoder.embed_tokens  # the stack alone: embeddings are the model's
    return encoder


def make_decoder(config):
    decoder = PegasusDecoder(pegasus_config(config))
    del decoder.embed_tokens
    return decoder


def encoder_self_mask(x, key_padding, causal):
    """The layer's additive mask: padding expanded, the causal bias laid over it."""
    bsz, length = x.shape[0], x.shape[1]
    if causal:
        return _prepare_decoder_attention_mask(_keep(key_padding), (bsz, length), x.dtype)
    if key_padding is None:
        return None
    return _expand_mask(_keep(key_padding), x.dtype)


def cross_mask(x, memory_key_padding):
    if memory_key_padding is None:
        return None
    return _expand_mask(_keep(memory_key_padding), x.dtype, tgt_len=x.shape[1])


def forward_mha(attn, query, key, value, key_padding=None):
    mask = cross_mask(query, key_padding)
    return attn(hidden_states=query, key_value_states=key, attention_mask=mask, value_states=value)


def forward_encoder_layer(layer, x, key_padding=None, causal=False):
    return layer(x, encoder_self_mask(x, key_padding, bool(causal)))


def forward_encoder(encoder, x, key_padding=None, causal=False):
    return encoder.run_layers(x, encoder_self_mask(x, key_padding, bool(causal)))


def forward_decoder_layer(layer, x, memory, key_padding=None, memory_key_padding=None, causal=False):
    return layer(x, attention_mask=encoder_self_mask(x, key_padding, bool(causal)), encoder_hidden_states=memory,
                 encoder_attention_mask=cross_mask(x, memory_key_padding))


def forward_decoder(decoder, x, memory, key_padding=None, memory_key_padding=None, causal=False):
    return decoder.run_layers(x, encoder_self_mask(x, key_padding, bool(causal)), memory, cross_mask(x, memory_key_padding))


def forward_seq2seq(model, src_ids, tgt_ids):
    src, tgt = _t(src_ids).long(), _t(tgt_ids).long()
    attention_mask = src.ne(model.config.pad_token_id).long()
    decoder_attention_mask = tgt.ne(model.config.pad_token_id).long()
    return model(input_ids=src, attention_mask=attention_mask, decoder_input_ids=tgt, decoder_attention_mask=decoder_attention_mask)


def forward_pe(module, positions):
    return F.embedding(_t(positions).long(), module.weight)


ATTN = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}
MHA_MAP = {f"{c}.{p}": f"{m}.{p}" for c, m in ATTN.items() for p in ("weight", "bias")}
ENC_LAYER = {f"self_attn.{k}": f"self_attn.{v}" for k, v in MHA_MAP.items()}
ENC_LAYER |= {f"norm1.{p}": f"self_attn_layer_norm.{p}" for p in ("weight", "bias")}
ENC_LAYER |= {f"ffn.fc1.{p}": f"fc1.{p}" for p in ("weight", "bias")}
ENC_LAYER |= {f"ffn.fc2.{p}": f"fc2.{p}" for p in ("weight", "bias")}
ENC_LAYER |= {f"norm2.{p}": f"final_layer_norm.{p}" for p in ("weight", "bias")}
DEC_LAYER = {f"self_attn.{k}": f"self_attn.{v}" for k, v in MHA_MAP.items()}
DEC_LAYER |= {f"cross_attn.{k}": f"encoder_attn.{v}" for k, v in MHA_MAP.items()}
DEC_LAYER |= {f"norm1.{p}": f"self_attn_layer_norm.{p}" for p in ("weight", "bias")}
DEC_LAYER |= {f"norm2.{p}": f"encoder_attn_layer_norm.{p}" for p in ("weight", "bias")}
DEC_LAYER |= {f"norm3.{p}": f"final_layer_norm.{p}" for p in ("weight", "bias")}
DEC_LAYER |= {f"ffn.fc1.{p}": f"fc1.{p}" for p in ("weight", "bias")}
DEC_LAYER |= {f"ffn.fc2.{p}": f"fc2.{p}" for p in ("weight", "bias")}


def stack_map(layer_map, n_layers):
    names = {f"norm.{p}": f"layer_norm.{p}" for p in ("weight", "bias")}
    for i in range(n_layers):
        names |= {f"layers.{i}.{k}": f"layers.{i}.{v}" for k, v in layer_map.items()}
    return names


def seq2seq_map(config):
    names = {"embedding.weight": "shared.weight"}
    names |= {f"encoder.{k}": f"encoder.{v}" for k, v in stack_map(ENC_LAYER, config.n_layers).items()}
    names |= {f"decoder.{k}": f"decoder.{v}" for k, v in stack_map(DEC_LAYER, config.n_decoder_layers).items()}
    return names


PEGASUS = Conventions(norm_placement="pre", pe_layout="concatenated", fully_masked_rows="uniform")
SPACE = ConfigSpace(split_heads=True, max_len=512)

adapter = TorchModuleAdapter("pegasus", [
    TorchEntry("sinusoidal_pe",
               make=lambda config: PegasusSinusoidalPositionalEmbedding(config.max_len, config.d_model),
               forward=forward_pe, conventions=Conventions(pe_layout="concatenated"), supports=SPACE),
    TorchEntry("mha", make=lambda config: PegasusAttention(config.d_model, config.n_heads, dropout=0.1),
               forward=forward_mha, param_map=MHA_MAP, conventions=PEGASUS, supports=SPACE),
    TorchEntry("encoder_layer", make=lambda config: PegasusEncoderLayer(pegasus_config(config)),
               forward=forward_encoder_layer, param_map=ENC_LAYER, conventions=PEGASUS, supports=SPACE),
    TorchEntry("decoder_layer", make=lambda config: PegasusDecoderLayer(pegasus_config(config)),
               forward=forward_decoder_layer, param_map=DEC_LAYER, conventions=PEGASUS, supports=SPACE),
    TorchEntry("encoder", make=make_encoder, forward=forward_encoder,
               param_map=lambda config: stack_map(ENC_LAYER, config.n_layers), conventions=PEGASUS, supports=SPACE),
    TorchEntry("decoder", make=make_decoder, forward=forward_decoder,
               param_map=lambda config: stack_map(DEC_LAYER, config.n_decoder_layers), conventions=PEGASUS, supports=SPACE),
    TorchEntry("seq2seq", make=lambda config: PegasusForConditionalGeneration(pegasus_config(config)),
               forward=forward_seq2seq, param_map=seq2seq_map, conventions=PEGASUS,
               supports=ConfigSpace(split_heads=True, max_len=512, tied=True)),
])
