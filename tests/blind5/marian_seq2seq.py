# fmt: off
# ruff: noqa
"""An encoder-decoder written the way HuggingFace's Marian/BART model files are: a
``MarianConfig`` dataclass, ``MarianAttention`` (q/k/v/out projections, the queries multiplied by
``scaling`` before the product, heads folded into the batch for ``torch.bmm``, cross-attention
when ``key_value_states`` is given), post-LN encoder and decoder layers
(``self_attn_layer_norm``, ``encoder_attn_layer_norm``, ``final_layer_norm``), an additive
attention mask from ``_expand_mask`` (``(1 - mask)`` filled with ``finfo.min``) combined with a
causal mask by ``masked_fill``, ``MarianSinusoidalPositionalEmbedding`` (sines in the first half
of the features, cosines in the second: ``pe_layout="concatenated"``), embeddings scaled by
sqrt(d_model), one ``shared`` embedding (padding id 0) for source, target and the output
projection, and GELU in the FFN. A query whose keys are all masked sees ``finfo.min`` on every
key and so averages every value (``fully_masked_rows="uniform"``).
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
import torch.nn.functional as F

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


@dataclass
class MarianConfig:
    vocab_size: int = 40
    d_model: int = 32
    encoder_attention_heads: int = 4
    decoder_attention_heads: int = 4
    encoder_ffn_dim: int = 64
    decoder_ffn_dim: int = 64
    encoder_layers: int = 2
    decoder_layers: int = 2
    max_position_embeddings: int = 512
    pad_token_id: int = 0
    scale_embedding: bool = True
    activation_function: str = "gelu"


ACT2FN = {"gelu": F.gelu, "relu": F.relu, "swish": F.silu}


def _expand_mask(mask, dtype, tgt_len=None):
    """[bsz, src_len] 1/0 -> [bsz, 1, tgt_len, src_len] additive (0 or finfo.min)."""
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len
    expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted_mask = 1.0 - expanded_mask
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


def _make_causal_mask(tgt_len, dtype):
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, dtype=dtype)
    mask_cond = torch.arange(mask.size(-1))
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    return mask[None, None, :, :]


def _prepare_decoder_attention_mask(attention_mask, input_shape, dtype):
    causal_mask = _make_causal_mask(input_shape[-1], dtype)
    if attention_mask is None:
        return causal_mask
    expanded_attn_mask = _expand_mask(attention_mask, dtype, tgt_len=input_shape[-1])
    return causal_mask.masked_fill(expanded_attn_mask.bool(), torch.finfo(dtype).min)


class MarianSinusoidalPositionalEmbedding(nn.Module):
    def __init__(self, num_positions, embedding_dim):
        super().__init__()
        self.register_buffer("weight", self._init_weight(num_positions, embedding_dim), persistent=False)

    @staticmethod
    def _init_weight(n_pos, dim):
        position_enc = torch.tensor([[pos / math.pow(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)], dtype=torch.float64)
        out = torch.empty(n_pos, dim, dtype=torch.float64)
        sentinel = dim // 2 if dim % 2 == 0 else (dim // 2) + 1
        out[:, 0:sentinel] = torch.sin(position_enc[:, 0::2])
        out[:, sentinel:] = torch.cos(position_enc[:, 1::2])
        return out

    def forward(self, input_ids_shape, past_key_values_length=0):
        bsz, seq_len = input_ids_shape[:2]
        positions = torch.arange(past_key_values_length, past_key_values_length + seq_len, dtype=torch.long)
        return self.weight[positions]


class MarianAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, is_decoder=False, bias=True):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.is_decoder = is_decoder
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _shape(self, tensor, seq_len, bsz):
        return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(self, hidden_states, key_value_states=None, attention_mask=None):
        is_cross_attention = key_value_states is not None
        bsz, tgt_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states) * self.scaling
        if is_cross_attention:
            key_states = self._shape(self.k_proj(key_value_states), -1, bsz)
            value_states = self._shape(self.v_proj(key_value_states), -1, bsz)
        else:
            key_states = self._shape(self.k_proj(hidden_states), -1, bsz)
            value_states = self._shape(self.v_proj(hidden_states), -1, bsz)
        proj_shape = (bsz * self.num_heads, -1, self.head_dim)
        query_states = self._shape(query_states, tgt_len, bsz).view(*proj_shape)
        key_states = key_states.reshape(*proj_shape)
        value_states = value_states.reshape(*proj_shape)
        src_len = key_states.size(1)
        attn_weights = torch.bmm(query_states, key_states.transpose(1, 2))
        if attention_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len) + attention_mask
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_output = torch.bmm(attn_weights, value_states)
        attn_output = attn_output.view(bsz, self.num_heads, tgt_len, self.head_dim)
        attn_output = attn_output.transpose(1, 2)
        attn_output = attn_output.reshape(bsz, tgt_len, self.embed_dim)
        return self.out_proj(attn_output)


class MarianEncoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_dim = config.d_model
        self.self_attn = MarianAttention(self.embed_dim, config.encoder_attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self.activation_fn = ACT2FN[config.activation_function]
        self.fc1 = nn.Linear(self.embed_dim, config.encoder_ffn_dim)
        self.fc2 = nn.Linear(config.encoder_ffn_dim, self.embed_dim)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim)

    def forward(self, hidden_states, attention_mask=None):
        residual = hidden_states
        attn_out = self.self_attn(hidden_states=hidden_states, attention_mask=attention_mask)
        hidden_states = self.self_attn_layer_norm(residual + attn_out)
        residual = hidden_states
        ffn_hidden = self.activation_fn(self.fc1(hidden_states))
        ffn_hidden = self.fc2(ffn_hidden)
        return self.final_layer_norm(residual + ffn_hidden)


class MarianDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_dim = config.d_model
        self.self_attn = MarianAttention(self.embed_dim, config.decoder_attention_heads, is_decoder=True)
        self.activation_fn = ACT2FN[config.activation_function]
        self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self.encoder_attn = MarianAttention(self.embed_dim, config.decoder_attention_heads, is_decoder=True)
        self.encoder_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self.fc1 = nn.Linear(self.embed_dim, config.decoder_ffn_dim)
        self.fc2 = nn.Linear(config.decoder_ffn_dim, self.embed_dim)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim)

    def forward(self, hidden_states, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None):
        residual = hidden_states
        self_attn_out = self.self_attn(hidden_states=hidden_states, attention_mask=attention_mask)
        hidden_states = self.self_attn_layer_norm(residual + self_attn_out)
        residual = hidden_states
        cross_attn_out = self.encoder_attn(hidden_states=hidden_states, key_value_states=encoder_hidden_states, attention_mask=encoder_attention_mask)
        hidden_states = self.encoder_attn_layer_norm(residual + cross_attn_out)
        residual = hidden_states
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = self.fc2(hidden_states)
        return self.final_layer_norm(residual + hidden_states)


class MarianEncoder(nn.Module):
    def __init__(self, config, embed_tokens):
        super().__init__()
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_tokens = embed_tokens
        self.embed_positions = MarianSinusoidalPositionalEmbedding(config.max_position_embeddings, config.d_model)
        self.layers = nn.ModuleList([MarianEncoderLayer(config) for _ in range(config.encoder_layers)])

    def forward(self, input_ids, attention_mask=None):
        inputs_embeds = self.embed_tokens(input_ids) * self.embed_scale
        embed_pos = self.embed_positions(input_ids.shape)
        hidden_states = inputs_embeds + embed_pos.to(inputs_embeds.dtype)
        if attention_mask is not None:
            attention_mask = _expand_mask(attention_mask, inputs_embeds.dtype)
        for encoder_layer in self.layers:
            hidden_states = encoder_layer(hidden_states, attention_mask)
        return hidden_states


class MarianDecoder(nn.Module):
    def __init__(self, config, embed_tokens):
        super().__init__()
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_tokens = embed_tokens
        self.embed_positions = MarianSinusoidalPositionalEmbedding(config.max_position_embeddings, config.d_model)
        self.layers = nn.ModuleList([MarianDecoderLayer(config) for _ in range(config.decoder_layers)])

    def forward(self, input_ids, attention_mask, encoder_hidden_states, encoder_attention_mask):
        input_shape = input_ids.size()
        inputs_embeds = self.embed_tokens(input_ids) * self.embed_scale
        attention_mask = _prepare_decoder_attention_mask(attention_mask, input_shape, inputs_embeds.dtype)
        if encoder_attention_mask is not None:
            encoder_attention_mask = _expand_mask(encoder_attention_mask, inputs_embeds.dtype, tgt_len=input_shape[-1])
        positions = self.embed_positions(input_shape)
        hidden_states = inputs_embeds + positions.to(inputs_embeds.dtype)
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, attention_mask=attention_mask, encoder_hidden_states=encoder_hidden_states, encoder_attention_mask=encoder_attention_mask)
        return hidden_states


class MarianMTModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.encoder = MarianEncoder(config, self.shared)
        self.decoder = MarianDecoder(config, self.shared)
        self.register_buffer("final_logits_bias", torch.zeros((1, config.vocab_size)))

    def forward(self, input_ids, decoder_input_ids):
        attention_mask = input_ids.ne(self.config.pad_token_id).long()
        decoder_attention_mask = decoder_input_ids.ne(self.config.pad_token_id).long()
        encoder_outputs = self.encoder(input_ids, attention_mask=attention_mask)
        decoder_outputs = self.decoder(decoder_input_ids, decoder_attention_mask, encoder_outputs, attention_mask)
        lm_logits = F.linear(decoder_outputs, self.shared.weight)
        return lm_logits + self.final_logits_bias.to(lm_logits.dtype)


# ---- the adapter ----

def to_config(cfg):
    return MarianConfig(vocab_size=cfg.vocab_size, d_model=cfg.d_model, encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads, encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, encoder_layers=cfg.n_layers, decoder_layers=cfg.n_decoder_layers, max_position_embeddings=cfg.max_len, pad_token_id=cfg.padding_idx)


def encoder_layer_forward(layer, x, key_padding=None, causal=False):
    mask = None
    if key_padding is not None:
        mask = _expand_mask(key_padding.long(), x.dtype)
    if causal:
        causal_mask = _make_causal_mask(x.shape[1], x.dtype)
        mask = causal_mask if mask is None else causal_mask.masked_fill(mask.bool(), torch.finfo(x.dtype).min)
    return layer(x, mask)


def decoder_layer_forward(layer, x, memory, key_padding=None, memory_key_padding=None, causal=False):
    self_mask = None
    if key_padding is not None:
        self_mask = _expand_mask(key_padding.long(), x.dtype)
    if causal:
        self_mask = _prepare_decoder_attention_mask(None if key_padding is None else key_padding.long(), x.shape[:2], x.dtype)
    cross_mask = None if memory_key_padding is None else _expand_mask(memory_key_padding.long(), x.dtype, tgt_len=x.shape[1])
    return layer(x, attention_mask=self_mask, encoder_hidden_states=memory, encoder_attention_mask=cross_mask)


ATTN = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}


def encoder_layer_map(prefix, canonical):
    names = {f"self_attn.{k}": f"self_attn.{v}" for k, v in ATTN.items()}
    names |= {"norm1": "self_attn_layer_norm", "ffn.fc1": "fc1", "ffn.fc2": "fc2", "norm2": "final_layer_norm"}
    return {f"{canonical}{k}.{p}": f"{prefix}{v}.{p}" for k, v in names.items() for p in ("weight", "bias")}


def decoder_layer_map(prefix, canonical):
    names = {f"self_attn.{k}": f"self_attn.{v}" for k, v in ATTN.items()}
    names |= {f"cross_attn.{k}": f"encoder_attn.{v}" for k, v in ATTN.items()}
    names |= {"norm1": "self_attn_layer_norm", "norm2": "encoder_attn_layer_norm", "ffn.fc1": "fc1", "ffn.fc2": "fc2", "norm3": "final_layer_norm"}
    return {f"{canonical}{k}.{p}": f"{prefix}{v}.{p}" for k, v in names.items() for p in ("weight", "bias")}


def seq2seq_map(cfg):
    out = {"embedding.weight": "shared.weight"}
    for i in range(cfg.n_layers):
        out |= encoder_layer_map(f"encoder.layers.{i}.", f"encoder.layers.{i}.")
    for i in range(cfg.n_decoder_layers):
        out |= decoder_layer_map(f"decoder.layers.{i}.", f"decoder.layers.{i}.")
    return out


CONVENTIONS = Conventions(activation="gelu", pe_layout="concatenated", fully_masked_rows="uniform")

adapter = TorchModuleAdapter("marian-seq2seq", [
    TorchEntry("encoder_layer", make=lambda cfg: MarianEncoderLayer(to_config(cfg)), forward=encoder_layer_forward,
               param_map=encoder_layer_map("", ""), conventions=CONVENTIONS),
    TorchEntry("decoder_layer", make=lambda cfg: MarianDecoderLayer(to_config(cfg)), forward=decoder_layer_forward,
               param_map=decoder_layer_map("", ""), conventions=CONVENTIONS),
    TorchEntry("seq2seq", make=lambda cfg: MarianMTModel(to_config(cfg)), forward=lambda m, src_ids, tgt_ids: m(src_ids, tgt_ids),
               param_map=seq2seq_map, conventions=CONVENTIONS, config={"tie_weights": True}),
])
