# fmt: off
# ruff: noqa
"""A Gemma-style decoder written the way transformers' ``modeling_gemma`` writes it today.

GemmaRMSNorm stores its gain as an offset (``weight`` starts at 0 and the norm multiplies by
``1 + weight``), the embeddings are multiplied by ``normalizer = sqrt(hidden_size)`` in the
hidden dtype, the MLP is GeGLU with the tanh GELU (``gelu_pytorch_tanh``), attention uses
grouped key/value heads (``repeat_kv``), RoPE by ``rotate_half`` from an ``inv_freq`` table,
a ``DynamicCache``-like object whose ``update()`` returns every key and value so far,
``cache_position`` derived from the cache length, masks built by mask functions
(``causal_mask_function`` and ``padding_mask_function`` combined by ``and_masks``, as
``masking_utils`` does), and an ``attention_interface`` chosen by ``_attn_implementation``
(``sdpa`` with a boolean mask, or ``eager`` with an additive mask and a float32 softmax).
The LM head is tied to the embedding.

16-bit inputs: the norm statistics, the softmax and the RoPE angles are formed in float32 or
better (Gemma's ``x.float()``); float64 builds stay in float64.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

_HALF = (torch.float16, torch.bfloat16)


def _upcast(dtype):
    return torch.float32 if dtype in _HALF else dtype


class GemmaConfig:
    def __init__(self, vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
                 num_key_value_heads, head_dim, max_position_embeddings, rms_norm_eps=1e-6, rope_theta=10000.0,
                 attention_dropout=0.1, pad_token_id=0, attn_implementation="sdpa"):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.attention_dropout = attention_dropout
        self.pad_token_id = pad_token_id
        self._attn_implementation = attn_implementation


class GemmaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.to(_upcast(x.dtype)))
        # Llama does x.to(float16) * w whilst Gemma is (x * (1 + w)).to(float16)
        output = output * (1.0 + self.weight.to(output.dtype))
        return output.type_as(x)


class GemmaMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.act_fn = nn.GELU(approximate="tanh")

    def forward(self, x):
        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return down_proj


class GemmaRotaryEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        dim = config.head_dim
        base = config.rope_theta
        # kept out of the buffers: module.to(float16) must not round the frequencies
        self.inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim))

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].to(torch.float64)
        freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos()
        sin = emb.sin()
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    """(batch, num_key_value_heads, seqlen, head_dim) -> (batch, num_attention_heads, seqlen, head_dim)"""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights.to(causal_mask.dtype) + causal_mask
    # upcast attention to fp32
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=_upcast(query.dtype)).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


def sdpa_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    key = repeat_kv(key, module.num_key_value_groups)
    value = repeat_kv(value, module.num_key_value_groups)
    attn_output = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=False
    )
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, None


ALL_ATTENTION_FUNCTIONS = {"eager": eager_attention_forward, "sdpa": sdpa_attention_forward}


class GemmaAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_values=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        if past_key_values is not None:
            key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx)

        attention_interface = ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]
        attn_output, attn_weights = attention_interface(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class GemmaDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.self_attn = GemmaAttention(config=config, layer_idx=layer_idx)
        self.mlp = GemmaMLP(config)
        self.input_layernorm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_values=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states, position_embeddings, attention_mask, past_key_values)
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


class DynamicCache:
    """Per layer, the keys and values of every token so far, grown along the sequence axis."""

    def __init__(self):
        self.key_cache = []
        self.value_cache = []

    def get_seq_length(self, layer_idx=0):
        if len(self.key_cache) <= layer_idx:
            return 0
        return self.key_cache[layer_idx].shape[-2]

    def update(self, key_states, value_states, layer_idx):
        if len(self.key_cache) <= layer_idx:
            self.key_cache.append(key_states)
            self.value_cache.append(value_states)
        else:
            self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)
            self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], value_states], dim=-2)
        return self.key_cache[layer_idx], self.value_cache[layer_idx]


# ---- masking_utils: a mask is a function of (batch_idx, head_idx, q_idx, kv_idx) -> keep
def causal_mask_function(batch_idx, head_idx, q_idx, kv_idx):
    return kv_idx <= q_idx


def padding_mask_function(padding_mask):
    def inner_mask(batch_idx, head_idx, q_idx, kv_idx):
        return padding_mask[batch_idx, kv_idx]
    return inner_mask


def and_masks(*mask_functions):
    def and_mask(batch_idx, head_idx, q_idx, kv_idx):
        result = q_idx.new_ones((), dtype=torch.bool)
        for mask in mask_functions:
            result = result & mask(batch_idx, head_idx, q_idx, kv_idx)
        return result
    return and_mask


def sdpa_mask(batch_size, cache_position, kv_length, mask_function):
    batch_idx = torch.arange(batch_size)[:, None, None, None]
    head_idx = torch.arange(1)[None, :, None, None]
    q_idx = cache_position[None, None, :, None]
    kv_idx = torch.arange(kv_length)[None, None, None, :]
    return mask_function(batch_idx, head_idx, q_idx, kv_idx).expand(batch_size, 1, len(cache_position), kv_length)


def eager_mask(batch_size, cache_position, kv_length, mask_function, dtype):
    mask = sdpa_mask(batch_size, cache_position, kv_length, mask_function)
    min_dtype = torch.finfo(dtype).min
    return torch.where(mask, torch.tensor(0.0, dtype=dtype), min_dtype)


def create_causal_mask(config, input_embeds, attention_mask, cache_position, past_key_values):
    batch_size = input_embeds.shape[0]
    kv_length = cache_position[-1].item() + 1
    mask_function = causal_mask_function
    if attention_mask is not None:
        mask_function = and_masks(causal_mask_function, padding_mask_function(attention_mask[:, :kv_length]))
    if config._attn_implementation == "eager":
        return eager_mask(batch_size, cache_position, kv_length, mask_function, _upcast(input_embeds.dtype))
    return sdpa_mask(batch_size, cache_position, kv_length, mask_function)


def prepare_decoder_inputs(config, rotary_emb, inputs_embeds, attention_mask, position_ids, past_key_values):
    """What GemmaModel.forward computes before its layers: cache_position, position ids,
    the mask and the rotary table (shared with the attention and block subjects)."""
    past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
    cache_position = torch.arange(past_seen_tokens, past_seen_tokens + inputs_embeds.shape[1])
    if position_ids is None:
        position_ids = cache_position.unsqueeze(0).expand(inputs_embeds.shape[0], -1)
    causal_mask = create_causal_mask(config, inputs_embeds, attention_mask, cache_position, past_key_values)
    position_embeddings = rotary_emb(inputs_embeds, position_ids)
    return causal_mask, position_embeddings


class GemmaModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.padding_idx = config.pad_token_id
        self.vocab_size = config.vocab_size
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
        self.layers = nn.ModuleList(
            [GemmaDecoderLayer(config, layer_idx) for layer_idx in range(config.num_hidden_layers)]
        )
        self.norm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = GemmaRotaryEmbedding(config=config)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        inputs_embeds = self.embed_tokens(input_ids)
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        causal_mask, position_embeddings = prepare_decoder_inputs(
            self.config, self.rotary_emb, inputs_embeds, attention_mask, position_ids, past_key_values
        )
        hidden_states = inputs_embeds
        # normalized: Gemma downcasts the below to the hidden dtype
        normalizer = torch.tensor(self.config.hidden_size**0.5, dtype=hidden_states.dtype)
        hidden_states = hidden_states * normalizer

        for decoder_layer in self.layers[: self.config.num_hidden_layers]:
            hidden_states = decoder_layer(hidden_states, position_embeddings, causal_mask, past_key_values)

        hidden_states = self.norm(hidden_states)
        return hidden_states, past_key_values


class GemmaForCausalLM(nn.Module):
    _tied_weights_keys = ["lm_head.weight"]

    def __init__(self, config):
        super().__init__()
        self.model = GemmaModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        hidden_states, past_key_values = self.model(input_ids, attention_mask, position_ids, past_key_values, use_cache)
        logits = self.lm_head(hidden_states)
        return logits, past_key_values


class GemmaAttentionOnly(nn.Module):
    """The attention subject: one GemmaAttention with the model's mask and rotary table."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.self_attn = GemmaAttention(config, layer_idx=0)
        self.rotary_emb = GemmaRotaryEmbedding(config)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None):
        causal_mask, position_embeddings = prepare_decoder_inputs(
            self.config, self.rotary_emb, hidden_states, attention_mask, position_ids, past_key_values
        )
        out, _ = self.self_attn(hidden_states, position_embeddings, causal_mask, past_key_values)
        return out


class GemmaLayerOnly(nn.Module):
    """The block subject: one GemmaDecoderLayer with the model's mask and rotary table."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.layer = GemmaDecoderLayer(config, layer_idx=0)
        self.rotary_emb = GemmaRotaryEmbedding(config)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None):
        causal_mask, position_embeddings = prepare_decoder_inputs(
            self.config, self.rotary_emb, hidden_states, attention_mask, position_ids, past_key_values
        )
        return self.layer(hidden_states, position_embeddings, causal_mask, past_key_values)


class GemmaRope(nn.Module):
    """The rope subject: the rotary table and apply_rotary_pos_emb on one tensor [B, H, L, d]."""

    def __init__(self, config):
        super().__init__()
        self.rotary_emb = GemmaRotaryEmbedding(config)

    def forward(self, x, positions):
        cos, sin = self.rotary_emb(x, positions.reshape(1, -1))
        rotated, _ = apply_rotary_pos_emb(x, x, cos, sin)
        return rotated


# ---- the adapter ------------------------------------------------------------------------
from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def gemma_config(config, attn_implementation="sdpa"):
    head_dim = config.d_k if config.d_k is not None else config.d_model // config.n_heads
    return GemmaConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.d_model,
        intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads or config.n_heads,
        head_dim=head_dim,
        max_position_embeddings=config.max_len,
        pad_token_id=config.padding_idx,
        attn_implementation=attn_implementation,
    )


def _torch(a, dtype=None):
    return None if a is None else torch.as_tensor(a) if dtype is None else torch.as_tensor(a, dtype=dtype)


def _layer_map(canon, ours):
    m = {f"{canon}self_attn.{c}.weight": f"{ours}self_attn.{c}_proj.weight" for c in "qkvo"}
    m[f"{canon}norm1.weight"] = f"{ours}input_layernorm.weight"
    m[f"{canon}norm2.weight"] = f"{ours}post_attention_layernorm.weight"
    for c in ("gate", "up", "down"):
        m[f"{canon}ffn.{c}.weight"] = f"{ours}mlp.{c}_proj.weight"
    return m


def _lm_map(config):
    m = {"embedding.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight"}
    for i in range(config.n_layers):
        m |= _layer_map(f"layers.{i}.", f"model.layers.{i}.")
    return m


def _decoder_call(module, x, key_padding=None, positions=None, past_key_values=None):
    mask = _torch(key_padding, torch.bool)
    pos = _torch(positions, torch.long)
    return module(x, mask, pos, past_key_values)


def _forward(module, x, key_padding=None, positions=None):
    return _decoder_call(module, x, key_padding, positions)


def _step(module, cache, x, key_padding=None, positions=None):
    cache = DynamicCache() if cache is None else cache
    return _decoder_call(module, x, key_padding, positions, cache), cache


def _lm_forward(module, ids, key_padding=None, positions=None):
    logits, _ = module(_torch(ids, torch.long), _torch(key_padding, torch.bool), _torch(positions, torch.long))
    return logits


def _lm_step(module, cache, ids, key_padding=None, positions=None):
    cache = DynamicCache() if cache is None else cache
    logits, cache = module(_torch(ids, torch.long), _torch(key_padding, torch.bool), _torch(positions, torch.long), cache, True)
    return logits, cache


def _is_offset_gain(name):
    """Gemma stores its RMSNorm gains as ``gain - 1``: these canonical names are gains."""
    return name == "weight" or name.endswith(("norm.weight", "norm1.weight", "norm2.weight"))


class GemmaAdapter(TorchModuleAdapter):
    """Canonical RMSNorm gain = 1 + Gemma's stored weight (the checkpoint converters' rule)."""

    def params(self, handle):
        out = super().params(handle)
        return {k: (v + 1.0 if _is_offset_gain(k) else v) for k, v in out.items()}

    def load(self, handle, params):
        super().load(handle, {k: (v - 1.0 if _is_offset_gain(k) else v) for k, v in params.items()})


_FIXED = {"n_kv_heads": 2, "bias": False}
_DECODER = dict(
    norm_placement="pre", activation="gelu_tanh", norm_kind="rms_norm", eps=1e-6, positions="rope",
    rope_layout="half_split", ffn_kind="gated", gate_activation="gelu_tanh", embedding_scale="emb",
)

adapter = GemmaAdapter("gemma-hf", [
    TorchEntry(
        "rms_norm",
        make=lambda config: GemmaRMSNorm(config.d_model, eps=1e-6),
        forward=lambda module, x: module(x),
        param_map={"weight": "weight"},
        conventions=Conventions(norm_kind="rms_norm", eps=1e-6),
    ),
    TorchEntry(
        "rope",
        make=lambda config: GemmaRope(gemma_config(config)),
        forward=lambda module, x, positions: module(x, _torch(positions, torch.long)),
        param_map={},
        conventions=Conventions(rope_layout="half_split"),
    ),
    TorchEntry(
        "gated_ffn",
        make=lambda config: GemmaMLP(gemma_config(config)),
        forward=lambda module, x: module(x),
        param_map={f"{c}.weight": f"{c}_proj.weight" for c in ("gate", "up", "down")},
        conventions=Conventions(ffn_kind="gated", gate_activation="gelu_tanh"),
        config={"bias": False},
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: GemmaAttentionOnly(gemma_config(config, "sdpa")),
        forward=_forward,
        step=_step,
        derives_positions=True,
        param_map={f"{c}.weight": f"self_attn.{c}_proj.weight" for c in "qkvo"},
        conventions=Conventions(**_DECODER),
        config=_FIXED,
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: GemmaLayerOnly(gemma_config(config, "sdpa")),
        forward=_forward,
        step=_step,
        derives_positions=True,
        param_map=_layer_map("", "layer."),
        conventions=Conventions(**_DECODER),
        config=_FIXED,
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: GemmaForCausalLM(gemma_config(config, "eager")),
        forward=_lm_forward,
        step=_lm_step,
        derives_positions=True,
        param_map=_lm_map,
        # eager: masked scores are set to finfo.min, so a query with no key left spreads its
        # weights evenly over every key
        conventions=Conventions(**_DECODER, fully_masked_rows="uniform"),
        config=_FIXED,
    ),
])
