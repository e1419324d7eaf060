# fmt: off
# ruff: noqa
"""A decoder-only model as transformers' OPT writes it (modeling_opt.py), written for the
twentieth blind benchmark: OPTLearnedPositionalEmbedding with its offset of 2, positions from
cumsum(attention_mask), pre-LN (do_layer_norm_before=True), ReLU fc1/fc2, q scaled by
head_dim ** -0.5 before the matmul, an additive finfo.min causal mask, a final LayerNorm, a
tied lm_head and a per-layer (key, value) cache concatenated along the sequence."""
import torch
import torch.nn.functional as F
from torch import nn


class OPTConfig:
    def __init__(self, vocab_size, hidden_size, num_attention_heads, ffn_dim, num_hidden_layers, max_position_embeddings, pad_token_id):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.ffn_dim = ffn_dim
        self.num_hidden_layers = num_hidden_layers
        self.max_position_embeddings = max_position_embeddings
        self.pad_token_id = pad_token_id
        self.do_layer_norm_before = True
        self.enable_bias = True
        self.layer_norm_elementwise_affine = True


class OPTLearnedPositionalEmbedding(nn.Embedding):
    """This module learns positional embeddings up to a fixed maximum size."""

    def __init__(self, num_embeddings, embedding_dim):
        # OPT is set up so that if padding_idx is specified then offset the embedding ids by 2
        # and adjust num_embeddings appropriately. Other models don't have this hack
        self.offset = 2
        super().__init__(num_embeddings, embedding_dim)
        # rows 0 and 1 of OPT's [max_positions + 2, D] table: read only by pads (position -1),
        # kept as a buffer so that the learned table is the spec's [max_len, D]
        self.register_buffer("offset_rows", torch.zeros(self.offset, embedding_dim))

    def forward(self, attention_mask, past_key_values_length=0, position_ids=None):
        if position_ids is None:
            position_ids = torch.cumsum(attention_mask, dim=1)
            position_ids = (position_ids * attention_mask - 1).long()
            # cut positions if `past_key_values_length` is > 0
            position_ids = position_ids[:, past_key_values_length:]
        table = torch.cat([self.offset_rows.to(self.weight.dtype), self.weight], dim=0)
        return F.embedding(position_ids + self.offset, table)


def prepare_4d_causal_attention_mask(attention_mask, tgt_len, past_key_values_length, dtype):
    """[B, S] keep-mask (1 = token) -> [B, 1, T, S] additive bias of 0 and finfo.min."""
    bsz, src_len = attention_mask.shape
    min_value = torch.finfo(dtype).min
    causal = torch.full((tgt_len, src_len), min_value, dtype=dtype, device=attention_mask.device)
    causal = torch.triu(causal, diagonal=past_key_values_length + 1)
    causal_4d = causal[None, None, :, :].expand(bsz, 1, tgt_len, src_len).clone()
    padding_mask = attention_mask[:, None, None, :] == 0
    causal_4d = causal_4d.masked_fill(padding_mask, min_value)
    return causal_4d


class OPTAttention(nn.Module):
    """Multi-headed attention from 'Attention Is All You Need' paper"""

    def __init__(self, config):
        super().__init__()
        self.embed_dim = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.embed_dim // self.num_heads
        self.scaling = self.head_dim**-0.5
        self.k_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=config.enable_bias)
        self.v_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=config.enable_bias)
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=config.enable_bias)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=config.enable_bias)

    def forward(self, hidden_states, past_key_value=None, attention_mask=None):
        bsz, tgt_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states) * self.scaling
        query_states = query_states.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        if past_key_value is not None:
            key_states = torch.cat([past_key_value[0], key_states], dim=2)
            value_states = torch.cat([past_key_value[1], value_states], dim=2)
        present_key_value = (key_states, value_states)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3))
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        upcast = torch.float32 if attn_weights.dtype in (torch.float16, torch.bfloat16) else attn_weights.dtype
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=upcast).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, tgt_len, self.embed_dim)
        attn_output = self.out_proj(attn_output)
        return attn_output, present_key_value


class OPTDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_dim = config.hidden_size
        self.self_attn = OPTAttention(config)
        self.do_layer_norm_before = config.do_layer_norm_before
        self.activation_fn = nn.ReLU()
        self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim, elementwise_affine=config.layer_norm_elementwise_affine)
        self.fc1 = nn.Linear(self.embed_dim, config.ffn_dim, bias=config.enable_bias)
        self.fc2 = nn.Linear(config.ffn_dim, self.embed_dim, bias=config.enable_bias)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim, elementwise_affine=config.layer_norm_elementwise_affine)

    def forward(self, hidden_states, attention_mask=None, past_key_value=None):
        residual = hidden_states
        # 125m, 1.7B, ..., 175B applies layer norm BEFORE attention
        if self.do_layer_norm_before:
            hidden_states = self.self_attn_layer_norm(hidden_states)
        hidden_states, present_key_value = self.self_attn(hidden_states, past_key_value=past_key_value, attention_mask=attention_mask)
        hidden_states = residual + hidden_states
        # 350m applies layer norm AFTER attention
        if not self.do_layer_norm_before:
            hidden_states = self.self_attn_layer_norm(hidden_states)
        # Fully Connected
        hidden_states_shape = hidden_states.shape
        hidden_states = hidden_states.reshape(-1, hidden_states.size(-1))
        residual = hidden_states
        if self.do_layer_norm_before:
            hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = self.fc1(hidden_states)
        hidden_states = self.activation_fn(hidden_states)
        hidden_states = self.fc2(hidden_states)
        hidden_states = (residual + hidden_states).view(hidden_states_shape)
        if not self.do_layer_norm_before:
            hidden_states = self.final_layer_norm(hidden_states)
        return hidden_states, present_key_value


class OPTDecoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.padding_idx = config.pad_token_id
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
        self.embed_positions = OPTLearnedPositionalEmbedding(config.max_position_embeddings, config.hidden_size)
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, elementwise_affine=config.layer_norm_elementwise_affine)
        self.layers = nn.ModuleList([OPTDecoderLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None):
        batch_size, seq_length = input_ids.shape
        past_key_values_length = past_key_values[0][0].shape[2] if past_key_values is not None else 0
        inputs_embeds = self.embed_tokens(input_ids)
        mask_seq_length = past_key_values_length + seq_length
        if attention_mask is None:
            attention_mask = torch.ones(batch_size, mask_seq_length, device=inputs_embeds.device)
        causal_attention_mask = prepare_4d_causal_attention_mask(attention_mask, seq_length, past_key_values_length, inputs_embeds.dtype)
        pos_embeds = self.embed_positions(attention_mask, past_key_values_length, position_ids=position_ids)
        hidden_states = inputs_embeds + pos_embeds.to(inputs_embeds.dtype)
        next_decoder_cache = []
        for idx, decoder_layer in enumerate(self.layers):
            past_key_value = past_key_values[idx] if past_key_values is not None else None
            hidden_states, present = decoder_layer(hidden_states, attention_mask=causal_attention_mask, past_key_value=past_key_value)
            next_decoder_cache.append(present)
        if self.final_layer_norm is not None:
            hidden_states = self.final_layer_norm(hidden_states)
        return hidden_states, next_decoder_cache


class OPTForCausalLM(nn.Module):
    _tied_weights_keys = ["lm_head.weight"]

    def __init__(self, config):
        super().__init__()
        self.decoder = OPTDecoder(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.lm_head.weight = self.decoder.embed_tokens.weight  # tie_word_embeddings

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None):
        hidden_states, cache = self.decoder(input_ids, attention_mask=attention_mask, position_ids=position_ids, past_key_values=past_key_values)
        logits = self.lm_head(hidden_states).contiguous()
        return logits, cache


# ---- the adapter
from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def opt_config(config):
    return OPTConfig(config.vocab_size, config.d_model, config.n_heads, config.d_ff, config.n_layers, config.max_len, config.padding_idx)


def _keep(key_padding, x, past):
    if key_padding is not None:
        return key_padding.to(torch.long)
    return torch.ones(x.shape[0], past + x.shape[1], dtype=torch.long, device=x.device)


def attention_forward(module, x, key_padding=None, positions=None):
    mask = prepare_4d_causal_attention_mask(_keep(key_padding, x, 0), x.shape[1], 0, x.dtype)
    return module(x, attention_mask=mask)[0]


def attention_step(module, cache, x, key_padding=None, positions=None):
    past = 0 if cache is None else cache[0].shape[2]
    mask = prepare_4d_causal_attention_mask(_keep(key_padding, x, past), x.shape[1], past, x.dtype)
    return module(x, past_key_value=cache, attention_mask=mask)


def block_forward(module, x, key_padding=None, positions=None):
    mask = prepare_4d_causal_attention_mask(_keep(key_padding, x, 0), x.shape[1], 0, x.dtype)
    return module(x, attention_mask=mask)[0]


def block_step(module, cache, x, key_padding=None, positions=None):
    past = 0 if cache is None else cache[0].shape[2]
    mask = prepare_4d_causal_attention_mask(_keep(key_padding, x, past), x.shape[1], past, x.dtype)
    return module(x, attention_mask=mask, past_key_value=cache)


def lm_forward(module, ids, key_padding=None, positions=None):
    mask = None if key_padding is None else key_padding.to(torch.long)
    return module(ids, attention_mask=mask, position_ids=positions)[0]


def lm_step(module, cache, ids, key_padding=None, positions=None):
    mask = None if key_padding is None else key_padding.to(torch.long)
    return module(ids, attention_mask=mask, position_ids=positions, past_key_values=cache)


ATTN = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}


def attn_map(prefix, ours):
    return {f"{prefix}{c}.{p}": f"{ours}{o}.{p}" for c, o in ATTN.items() for p in ("weight", "bias")}


def block_map(prefix, ours):
    names = {"norm1": "self_attn_layer_norm", "norm2": "final_layer_norm", "ffn.fc1": "fc1", "ffn.fc2": "fc2"}
    out = attn_map(f"{prefix}self_attn.", f"{ours}self_attn.")
    out |= {f"{prefix}{c}.{p}": f"{ours}{o}.{p}" for c, o in names.items() for p in ("weight", "bias")}
    return out


def lm_map(config):
    out = {"embedding.weight": "decoder.embed_tokens.weight"}
    # OPT's table has max_len + 2 rows and position p reads row p + 2: the learned rows 2 ..
    # max_len + 1 are the parameter (the spec's table), rows 0 and 1 the buffer offset_rows
    out["pos_embedding.weight"] = "decoder.embed_positions.weight"
    out["norm.weight"] = "decoder.final_layer_norm.weight"
    out["norm.bias"] = "decoder.final_layer_norm.bias"
    for i in range(config.n_layers):
        out |= block_map(f"layers.{i}.", f"decoder.layers.{i}.")
    return out


OPT = Conventions(norm_placement="pre", activation="relu", embedding_scale="none", fully_masked_rows="uniform")

adapter = TorchModuleAdapter("blind20-opt-decoder", [
    TorchEntry("layer_norm", make=lambda config: nn.LayerNorm(config.d_model), forward=lambda m, x: m(x)),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: OPTAttention(opt_config(config)),
        forward=attention_forward,
        step=attention_step,
        param_map=attn_map("", ""),
        conventions=OPT,
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: OPTDecoderLayer(opt_config(config)),
        forward=block_forward,
        step=block_step,
        param_map=block_map("", ""),
        conventions=OPT,
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: OPTForCausalLM(opt_config(config)),
        forward=lm_forward,
        step=lm_step,
        param_map=lm_map,
        conventions=OPT,
        derives_positions=True,
        supports=ConfigSpace(split_heads=True, max_len=512, tied=True),
    ),
])
