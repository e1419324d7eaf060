# fmt: off
# ruff: noqa
"""A decoder as transformers' `models/falcon/modeling_falcon.py` writes it, for the Falcon-7B
layout: `multi_query = True`, `parallel_attn = False`, `new_decoder_architecture = False`,
`alibi = False`, `bias = False`. ONE fused `query_key_value` linear gives all query heads, then a
single key head and a single value head (`_split_heads`); multi-query attention; `rotate_half`
RoPE; LayerNorms with bias (`input_layernorm`, `post_attention_layernorm`, `ln_f`); linears
without bias; an exact-GELU MLP `dense_h_to_4h` / `dense_4h_to_h`; a tied `lm_head`; the causal
mask as an additive `finfo.min` bias; the cache as per-layer (key, value) tensors concatenated
along the sequence.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


class FalconConfig:
    def __init__(self, vocab_size=65024, hidden_size=4544, num_hidden_layers=32, num_attention_heads=71, ffn_hidden_size=None, layer_norm_epsilon=1e-5, rope_theta=10000.0, max_position_embeddings=2048, hidden_dropout=0.0, attention_dropout=0.0):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.ffn_hidden_size = ffn_hidden_size if ffn_hidden_size is not None else hidden_size * 4
        self.layer_norm_epsilon = layer_norm_epsilon
        self.rope_theta = rope_theta
        self.max_position_embeddings = max_position_embeddings
        self.hidden_dropout = hidden_dropout
        self.attention_dropout = attention_dropout
        self.multi_query = True
        self.parallel_attn = False
        self.new_decoder_architecture = False
        self.alibi = False
        self.bias = False
        self.tie_word_embeddings = True

    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class FalconRotaryEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        dim = config.head_dim
        # a plain attribute, not a buffer: module.to(float16) must not round the frequencies
        self.inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim))

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].expand(position_ids.shape[0], -1, 1).to(x.device)
        position_ids_expanded = position_ids[:, None, :].to(torch.float64)
        freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos()
        sin = emb.sin()
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def dropout_add(x, residual, prob, training):
    out = F.dropout(x, p=prob, training=training)
    out = residual + out
    return out


def _prepare_4d_causal_attention_mask(attention_mask, batch_size, query_length, past_key_values_length, dtype, device):
    """The additive bias [B, 1, q, past + q]: 0 where a query may attend, finfo(dtype).min elsewhere."""
    key_length = past_key_values_length + query_length
    causal = torch.ones(query_length, key_length, dtype=torch.bool, device=device).tril(diagonal=past_key_values_length)
    keep = causal[None, None, :, :].expand(batch_size, 1, query_length, key_length)
    if attention_mask is not None:
        keep = keep & attention_mask[:, None, None, :].to(torch.bool)
    min_dtype = torch.finfo(dtype).min
    return torch.zeros(keep.shape, dtype=dtype, device=device).masked_fill(~keep, min_dtype)


class FalconAttention(nn.Module):
    def __init__(self, config, layer_idx=None):
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.hidden_size // self.num_heads
        self.split_size = self.hidden_size
        self.hidden_dropout = config.hidden_dropout
        self.layer_idx = layer_idx
        if self.head_dim * self.num_heads != self.hidden_size:
            raise ValueError(f"`hidden_size` must be divisible by num_heads (got `hidden_size`: {self.hidden_size} and `num_heads`: {self.num_heads}).")
        self.rotary_emb = FalconRotaryEmbedding(config)
        self.inv_norm_factor = 1.0 / math.sqrt(self.head_dim)
        self.beta = self.inv_norm_factor
        qkv_out_dim = self.hidden_size + 2 * self.head_dim
        self.query_key_value = nn.Linear(self.hidden_size, qkv_out_dim, bias=config.bias)
        self.multi_query = config.multi_query
        self.dense = nn.Linear(self.hidden_size, self.hidden_size, bias=config.bias)
        self.attention_dropout = nn.Dropout(config.attention_dropout)
        self.num_kv_heads = 1

    def _split_heads(self, fused_qkv):
        """fused_qkv [batch, seq, (num_heads + 2) * head_dim] -> query [batch, seq, num_heads, head_dim], key and value [batch, seq, 1, head_dim]"""
        batch_size, seq_length, three_times_hidden_size = fused_qkv.shape
        fused_qkv = fused_qkv.view(batch_size, seq_length, self.num_heads + 2, self.head_dim)
        return fused_qkv[..., :-2, :], fused_qkv[..., [-2], :], fused_qkv[..., [-1], :]

    def _merge_heads(self, x):
        """x [batch, num_heads, seq, head_dim] -> [batch, seq, num_heads * head_dim]"""
        batch_size, num_heads, seq_length, _ = x.shape
        x = x.permute(0, 2, 1, 3)
        return x.reshape(batch_size, seq_length, num_heads * self.head_dim)

    def forward(self, hidden_states, attention_mask, position_ids, layer_past=None, use_cache=False):
        fused_qkv = self.query_key_value(hidden_states)  # [batch_size, seq_length, 3 x hidden_size]
        (query_layer, key_layer, value_layer) = self._split_heads(fused_qkv)
        batch_size, query_length, _, _ = query_layer.shape
        query_layer = query_layer.transpose(1, 2).reshape(batch_size, self.num_heads, query_length, self.head_dim)
        key_layer = key_layer.transpose(1, 2).reshape(batch_size, self.num_kv_heads, query_length, self.head_dim)
        value_layer = value_layer.transpose(1, 2).reshape(batch_size, self.num_kv_heads, query_length, self.head_dim)
        cos, sin = self.rotary_emb(value_layer, position_ids)
        query_layer, key_layer = apply_rotary_pos_emb(query_layer, key_layer, cos, sin)
        if layer_past is not None:
            past_key, past_value = layer_past
            key_layer = torch.cat((past_key, key_layer), dim=-2)
            value_layer = torch.cat((past_value, value_layer), dim=-2)
        present = (key_layer, value_layer) if use_cache else None
        attention_scores = query_layer @ key_layer.transpose(-1, -2)
        attention_scores /= math.sqrt(self.head_dim)
        softmax_dtype = torch.promote_types(hidden_states.dtype, torch.float32)
        attention_scores = F.softmax(attention_scores.to(softmax_dtype) + attention_mask, dim=-1, dtype=softmax_dtype).to(hidden_states.dtype)
        attention_scores = self.attention_dropout(attention_scores)
        attn_output = attention_scores @ value_layer  # the single key/value head broadcasts over the query heads
        attn_output = self._merge_heads(attn_output)
        attn_output = self.dense(attn_output)
        return attn_output, present


class FalconMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        hidden_size = config.hidden_size
        self.dense_h_to_4h = nn.Linear(hidden_size, config.ffn_hidden_size, bias=config.bias)
        self.act = nn.GELU()
        self.dense_4h_to_h = nn.Linear(config.ffn_hidden_size, hidden_size, bias=config.bias)
        self.hidden_dropout = config.hidden_dropout

    def forward(self, x):
        x = self.act(self.dense_h_to_4h(x))
        x = self.dense_4h_to_h(x)
        return x


class FalconDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx=None):
        super().__init__()
        hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.self_attention = FalconAttention(config, layer_idx)
        self.mlp = FalconMLP(config)
        self.hidden_dropout = config.hidden_dropout
        self.config = config
        # parallel_attn = False, new_decoder_architecture = False: two LayerNorms, one per sublayer
        self.input_layernorm = nn.LayerNorm(hidden_size, eps=config.layer_norm_epsilon)
        self.post_attention_layernorm = nn.LayerNorm(hidden_size, eps=config.layer_norm_epsilon)

    def forward(self, hidden_states, attention_mask, position_ids, layer_past=None, use_cache=False):
        residual = hidden_states
        attention_layernorm_out = self.input_layernorm(hidden_states)
        attention_output, present = self.self_attention(attention_layernorm_out, attention_mask=attention_mask, position_ids=position_ids, layer_past=layer_past, use_cache=use_cache)
        residual = dropout_add(attention_output, residual, self.config.attention_dropout, training=self.training)
        mlp_layernorm_out = self.post_attention_layernorm(residual)
        mlp_output = self.mlp(mlp_layernorm_out)
        output = dropout_add(mlp_output, residual, self.config.hidden_dropout, training=self.training)
        return output, present


class FalconModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_dim = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.word_embeddings = nn.Embedding(config.vocab_size, self.embed_dim)
        self.h = nn.ModuleList([FalconDecoderLayer(config, layer_idx=i) for i in range(config.num_hidden_layers)])
        self.ln_f = nn.LayerNorm(self.embed_dim, eps=config.layer_norm_epsilon)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        batch_size, seq_length = input_ids.shape
        if past_key_values is None:
            past_key_values = tuple([None] * len(self.h))
        past_key_values_length = 0 if past_key_values[0] is None else past_key_values[0][0].shape[-2]
        if past_key_values_length + seq_length > self.config.max_position_embeddings:
            raise ValueError(f"sequence of {past_key_values_length + seq_length} tokens is longer than max_position_embeddings ({self.config.max_position_embeddings})")
        if position_ids is None:
            position_ids = torch.arange(past_key_values_length, past_key_values_length + seq_length, device=input_ids.device).unsqueeze(0).expand(batch_size, -1)
        inputs_embeds = self.word_embeddings(input_ids)
        hidden_states = inputs_embeds
        causal_mask = _prepare_4d_causal_attention_mask(attention_mask, batch_size, seq_length, past_key_values_length, hidden_states.dtype, hidden_states.device)
        presents = () if use_cache else None
        for block, layer_past in zip(self.h, past_key_values):
            hidden_states, present = block(hidden_states, attention_mask=causal_mask, position_ids=position_ids, layer_past=layer_past, use_cache=use_cache)
            if use_cache:
                presents = presents + (present,)
        hidden_states = self.ln_f(hidden_states)
        return hidden_states, presents


class FalconForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = FalconModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.transformer.word_embeddings.weight

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        hidden_states, presents = self.transformer(input_ids, attention_mask=attention_mask, position_ids=position_ids, past_key_values=past_key_values, use_cache=use_cache)
        lm_logits = self.lm_head(hidden_states)
        return lm_logits, presents


# ---- the adapter ------------------------------------------------------------------------

def falcon_config(config):
    return FalconConfig(vocab_size=config.vocab_size, hidden_size=config.d_model, num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads, ffn_hidden_size=config.d_ff, max_position_embeddings=config.max_len)


def _tensor(a, like, dtype=None):
    return torch.as_tensor(a, device=like.device, dtype=dtype)


def _positions(positions, batch_size, length, start, like):
    if positions is None:
        return torch.arange(start, start + length, device=like.device).unsqueeze(0).expand(batch_size, -1)
    return _tensor(positions, like, torch.int64)


def _keep(key_padding, like):
    return None if key_padding is None else _tensor(key_padding, like, torch.bool)


def _past_length(layer_past):
    return 0 if layer_past is None else layer_past[0].shape[-2]


def attn_step(attn, cache, x, key_padding=None, positions=None):
    batch_size, length, _ = x.shape
    start = _past_length(cache)
    if start + length > attn.config.max_position_embeddings:
        raise ValueError("sequence longer than max_position_embeddings")
    mask = _prepare_4d_causal_attention_mask(_keep(key_padding, x), batch_size, length, start, x.dtype, x.device)
    out, present = attn(x, attention_mask=mask, position_ids=_positions(positions, batch_size, length, start, x), layer_past=cache, use_cache=True)
    return out, present


def attn_forward(attn, x, key_padding=None, positions=None):
    return attn_step(attn, None, x, key_padding, positions)[0]


def block_step(block, cache, x, key_padding=None, positions=None):
    batch_size, length, _ = x.shape
    start = _past_length(cache)
    if start + length > block.config.max_position_embeddings:
        raise ValueError("sequence longer than max_position_embeddings")
    mask = _prepare_4d_causal_attention_mask(_keep(key_padding, x), batch_size, length, start, x.dtype, x.device)
    out, present = block(x, attention_mask=mask, position_ids=_positions(positions, batch_size, length, start, x), layer_past=cache, use_cache=True)
    return out, present


def block_forward(block, x, key_padding=None, positions=None):
    return block_step(block, None, x, key_padding, positions)[0]


def lm_step(model, cache, ids, key_padding=None, positions=None):
    weight = model.lm_head.weight
    ids = _tensor(ids, weight, torch.int64)
    logits, presents = model(ids, attention_mask=_keep(key_padding, weight), position_ids=None if positions is None else _tensor(positions, weight, torch.int64), past_key_values=cache, use_cache=True)
    return logits, presents


def lm_forward(model, ids, key_padding=None, positions=None):
    return lm_step(model, None, ids, key_padding, positions)[0]


def make_attention(config):
    return FalconAttention(falcon_config(config))


def make_block(config):
    return FalconDecoderLayer(falcon_config(config))


def make_lm(config):
    return FalconForCausalLM(falcon_config(config))


def make_layer_norm(config):
    fc = falcon_config(config)
    return nn.LayerNorm(fc.hidden_size, eps=fc.layer_norm_epsilon)


def attention_map(config, prefix=""):
    d, hd = config.d_model, config.d_model // config.n_heads
    fused = f"{prefix}query_key_value.weight"
    return {
        "q.weight": Param(fused, slice=(0, 0, d)),
        "k.weight": Param(fused, slice=(0, d, d + hd)),
        "v.weight": Param(fused, slice=(0, d + hd, d + 2 * hd)),
        "o.weight": f"{prefix}dense.weight",
    }


def block_map(config, prefix=""):
    out = {f"self_attn.{k}": v for k, v in attention_map(config, f"{prefix}self_attention.").items()}
    for p in ("weight", "bias"):
        out[f"norm1.{p}"] = f"{prefix}input_layernorm.{p}"
        out[f"norm2.{p}"] = f"{prefix}post_attention_layernorm.{p}"
    out["ffn.fc1.weight"] = f"{prefix}mlp.dense_h_to_4h.weight"
    out["ffn.fc2.weight"] = f"{prefix}mlp.dense_4h_to_h.weight"
    return out


def lm_map(config):
    out = {"embedding.weight": "transformer.word_embeddings.weight"}
    for i in range(config.n_layers):
        out |= {f"layers.{i}.{k}": v for k, v in block_map(config, f"transformer.h.{i}.").items()}
    out |= {f"norm.{p}": f"transformer.ln_f.{p}" for p in ("weight", "bias")}
    return out


CONVENTIONS = Conventions(
    norm_placement="pre", activation="gelu", positions="rope", rope_layout="half_split",
    embedding_scale="none", fully_masked_rows="uniform",
)
FIXED = {"n_kv_heads": 1}
BIASES = {"attention": False, "ffn": False}
SPACE = ConfigSpace(fixed=FIXED, split_heads=True, max_len=512, biases=BIASES)
LM_SPACE = ConfigSpace(fixed=FIXED, split_heads=True, max_len=512, biases=BIASES, tied=True)
CONFIG = {"n_kv_heads": 1, "attention_bias": False, "ffn_bias": False}

adapter = TorchModuleAdapter("falcon-decoder", [
    TorchEntry("layer_norm", make=make_layer_norm, forward=lambda ln, x: ln(x)),
    TorchEntry("causal_self_attention", make=make_attention, forward=attn_forward, step=attn_step,
               param_map=attention_map, conventions=CONVENTIONS, config=CONFIG, supports=SPACE, derives_positions=True),
    TorchEntry("decoder_block", make=make_block, forward=block_forward, step=block_step,
               param_map=block_map, conventions=CONVENTIONS, config=CONFIG, supports=SPACE, derives_positions=True),
    TorchEntry("causal_lm", make=make_lm, forward=lm_forward, step=lm_step,
               param_map=lm_map, conventions=CONVENTIONS, config={**CONFIG, "tie_weights": True}, supports=LM_SPACE, derives_positions=True),
])
