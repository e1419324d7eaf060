# fmt: off
# ruff: noqa
"""StableLM (StableLM-2 / StableLM-3B-4E1T) as transformers' ``modeling_stablelm.py`` (4.4x,
eager attention, ``DynamicCache``) writes it, with ``use_parallel_residual=False`` (sequential
blocks), ``partial_rotary_factor=1.0`` and one key/value head per query head; then the kit's
adapter (the glue at the end of the file). Blind set 27, written for this benchmark."""

import math
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn


class SiLUActivation(nn.Module):
    def forward(self, input):
        return F.silu(input)


ACT2FN = {"silu": SiLUActivation, "swish": SiLUActivation}


class StableLmConfig:
    model_type = "stablelm"

    def __init__(self, vocab_size=50304, intermediate_size=6912, hidden_size=2560, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=32, hidden_act="silu", max_position_embeddings=4096,
                 layer_norm_eps=1.0e-5, use_qkv_bias=False, qk_layernorm=False, use_parallel_residual=False,
                 hidden_dropout=0.0, attention_dropout=0.0, partial_rotary_factor=0.25, rope_theta=10_000,
                 tie_word_embeddings=False):
        self.vocab_size = vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.hidden_act = hidden_act
        self.layer_norm_eps = layer_norm_eps
        self.use_qkv_bias = use_qkv_bias
        self.qk_layernorm = qk_layernorm
        self.use_parallel_residual = use_parallel_residual
        self.hidden_dropout = hidden_dropout
        self.attention_dropout = attention_dropout
        self.partial_rotary_factor = partial_rotary_factor
        self.rope_theta = rope_theta
        self.tie_word_embeddings = tie_word_embeddings


class DynamicCache:
    """A cache that grows dynamically as more tokens are generated: per layer, key and value
    states of shape `[batch_size, num_heads, seq_len, head_dim]`."""

    def __init__(self) -> None:
        self.key_cache: List[torch.Tensor] = []
        self.value_cache: List[torch.Tensor] = []
        self._seen_tokens = 0

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        if layer_idx == 0:
            self._seen_tokens += key_states.shape[-2]
        if len(self.key_cache) <= layer_idx:
            self.key_cache.append(key_states)
            self.value_cache.append(value_states)
        else:
            self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)
            self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], value_states], dim=-2)
        return self.key_cache[layer_idx], self.value_cache[layer_idx]

    def get_seq_length(self, layer_idx: Optional[int] = 0) -> int:
        if len(self.key_cache) <= layer_idx:
            return 0
        return self.key_cache[layer_idx].shape[-2]

    def get_usable_length(self, new_seq_length: int, layer_idx: Optional[int] = 0) -> int:
        return self.get_seq_length(layer_idx)


class StableLmRotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=2048, base=10000, device=None):
        super().__init__()
        self.dim = dim
        self.max_position_embeddings = max_position_embeddings
        self.base = base
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.int64).double().to(device) / self.dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._set_cos_sin_cache(seq_len=max_position_embeddings, device=self.inv_freq.device, dtype=torch.float64)

    def _set_cos_sin_cache(self, seq_len, device, dtype):
        self.max_seq_len_cached = seq_len
        t = torch.arange(self.max_seq_len_cached, device=device, dtype=torch.int64).type_as(self.inv_freq)
        freqs = torch.outer(t, self.inv_freq)
        # Different from paper, but it uses a different permutation in order to obtain the same calculation
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos_cached = emb.cos().to(dtype)
        self.sin_cached = emb.sin().to(dtype)

    def forward(self, x, seq_len=None):
        # x: [bs, num_attention_heads, seq_len, head_size]
        if seq_len > self.max_seq_len_cached:
            raise ValueError(f"sequence length {seq_len} exceeds max_position_embeddings {self.max_seq_len_cached}")
        return (
            self.cos_cached[:seq_len].to(device=x.device, dtype=x.dtype),
            self.sin_cached[:seq_len].to(device=x.device, dtype=x.dtype),
        )


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids, unsqueeze_dim=1):
    """Applies Rotary Position Embedding to the query and key tensors."""
    cos = cos[position_ids].unsqueeze(unsqueeze_dim)
    sin = sin[position_ids].unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class StableLmMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class StableLmAttention(nn.Module):
    """Multi-headed attention from 'Attention Is All You Need' paper"""

    def __init__(self, config: StableLmConfig, layer_idx: Optional[int] = None):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.hidden_size // self.num_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.max_position_embeddings = config.max_position_embeddings
        self.rope_theta = config.rope_theta
        self.partial_rotary_factor = config.partial_rotary_factor
        self.is_causal = True

        if (self.head_dim * self.num_heads) != self.hidden_size:
            raise ValueError(
                f"hidden_size must be divisible by num_heads (got `hidden_size`: {self.hidden_size}"
                f" and `num_heads`: {self.num_heads})."
            )
        self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=config.use_qkv_bias)
        self.k_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=config.use_qkv_bias)
        self.v_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=config.use_qkv_bias)
        self.o_proj = nn.Linear(self.hidden_size, self.hidden_size, bias=False)

        self.attention_dropout = nn.Dropout(config.attention_dropout)
        self.rotary_emb = StableLmRotaryEmbedding(
            int(self.partial_rotary_factor * self.head_dim),
            max_position_embeddings=self.max_position_embeddings,
            base=self.rope_theta,
        )

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.LongTensor] = None,
        past_key_value: Optional[DynamicCache] = None,
    ) -> torch.Tensor:
        bsz, q_len, _ = hidden_states.size()

        query_states = self.q_proj(hidden_states)
        key_states = self.k_proj(hidden_states)
        value_states = self.v_proj(hidden_states)

        query_states = query_states.view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = key_states.view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        value_states = value_states.view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)

        kv_seq_len = key_states.shape[-2]
        if past_key_value is not None:
            kv_seq_len += past_key_value.get_usable_length(kv_seq_len, self.layer_idx)
        cos, sin = self.rotary_emb(value_states, seq_len=max(kv_seq_len, int(position_ids.max()) + 1))

        # Partial rotary embedding
        query_rot, query_pass = (
            query_states[..., : self.rotary_emb.dim],
            query_states[..., self.rotary_emb.dim :],
        )
        key_rot, key_pass = (
            key_states[..., : self.rotary_emb.dim],
            key_states[..., self.rotary_emb.dim :],
        )
        # [batch_size, seq_length, num_heads, head_dim // config.partial_rotary_factor]
        query_rot, key_rot = apply_rotary_pos_emb(query_rot, key_rot, cos, sin, position_ids)

        # [batch_size, seq_length, num_heads, head_dim]
        query_states = torch.cat((query_rot, query_pass), dim=-1)
        key_states = torch.cat((key_rot, key_pass), dim=-1)

        if past_key_value is not None:
            # Specific to RoPE models with partial rotation
            cache_kwargs = {"sin": sin, "cos": cos, "partial_rotation_size": self.rotary_emb.dim}
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx, cache_kwargs)

        # Repeat k/v heads if n_kv_heads < n_heads
        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)

        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)

        if attention_mask is not None:
            causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
            attn_weights = attn_weights + causal_mask

        # upcast attention to fp32
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.promote_types(attn_weights.dtype, torch.float32)).to(value_states.dtype)
        attn_weights = self.attention_dropout(attn_weights)

        attn_output = torch.matmul(attn_weights, value_states)

        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, self.hidden_size)

        attn_output = self.o_proj(attn_output)
        return attn_output


class StableLmDecoderLayer(nn.Module):
    def __init__(self, config: StableLmConfig, layer_idx: int):
        super().__init__()
        self.use_parallel_residual = config.use_parallel_residual
        self.hidden_size = config.hidden_size
        self.self_attn = StableLmAttention(config, layer_idx=layer_idx)
        self.mlp = StableLmMLP(config)
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.post_attention_layernorm = None
        if not self.use_parallel_residual:
            self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None):
        residual = hidden_states

        hidden_states = self.input_layernorm(hidden_states)

        # Self Attention
        self_attn_output = self.self_attn(
            hidden_states=hidden_states,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_value=past_key_value,
        )

        # copied from transformers.models.gpt_neox.modeling_gpt_neox.GPTNeoXLayer.forward
        if self.use_parallel_residual:
            # x = x + attn(ln1(x)) + mlp(ln1(x))
            # Fully Connected
            mlp_output = self.mlp(hidden_states)
            mlp_output = self.dropout(mlp_output)
            hidden_states = residual + self_attn_output + mlp_output
        else:
            # x = x + attn(ln1(x))
            # x = x + mlp(ln2(x))
            residual = residual + self_attn_output
            # Fully Connected
            mlp_output = self.mlp(self.post_attention_layernorm(residual))
            mlp_output = self.dropout(mlp_output)
            hidden_states = residual + mlp_output

        return hidden_states


def _update_causal_mask(attention_mask, input_tensor, cache_position, target_length):
    """The 4-D additive mask `[bsz, 1, q_len, target_length]`: the dtype's minimum where a query
    may not attend (a later token, or padding), 0 where it may."""
    dtype, device = input_tensor.dtype, input_tensor.device
    min_dtype = torch.finfo(dtype).min
    sequence_length = input_tensor.shape[1]
    causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype, device=device)
    if sequence_length != 1:
        causal_mask = torch.triu(causal_mask, diagonal=1)
    causal_mask *= torch.arange(target_length, device=device) > cache_position.reshape(-1, 1)
    causal_mask = causal_mask[None, None, :, :].expand(input_tensor.shape[0], 1, -1, -1)
    if attention_mask is not None:
        causal_mask = causal_mask.clone()  # copy to contiguous memory for in-place edit
        mask_length = attention_mask.shape[-1]
        padding_mask = causal_mask[:, :, :, :mask_length] + attention_mask[:, None, None, :]
        padding_mask = padding_mask == 0
        causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(padding_mask, min_dtype)
    return causal_mask


class StableLmModel(nn.Module):
    def __init__(self, config: StableLmConfig):
        super().__init__()
        self.padding_idx = None
        self.vocab_size = config.vocab_size

        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
        self.layers = nn.ModuleList(
            [StableLmDecoderLayer(config, layer_idx) for layer_idx in range(config.num_hidden_layers)]
        )
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        batch_size, seq_length = input_ids.shape

        past_key_values_length = 0
        if use_cache:
            if past_key_values is None:
                past_key_values = DynamicCache()
            past_key_values_length = past_key_values.get_usable_length(seq_length)

        cache_position = torch.arange(past_key_values_length, past_key_values_length + seq_length, device=input_ids.device)
        if position_ids is None:
            position_ids = cache_position.unsqueeze(0)

        inputs_embeds = self.embed_tokens(input_ids)

        causal_mask = _update_causal_mask(attention_mask, inputs_embeds, cache_position, past_key_values_length + seq_length)

        hidden_states = inputs_embeds

        for decoder_layer in self.layers:
            hidden_states = decoder_layer(
                hidden_states,
                attention_mask=causal_mask,
                position_ids=position_ids,
                past_key_value=past_key_values,
            )

        hidden_states = self.norm(hidden_states)
        return hidden_states, past_key_values


class StableLmForCausalLM(nn.Module):
    _tied_weights_keys = ["lm_head.weight"]

    def __init__(self, config):
        super().__init__()
        self.model = StableLmModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        hidden_states, past_key_values = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
        )
        logits = self.lm_head(hidden_states)
        return logits, past_key_values


# ---- the kit's adapter (glue, not part of the port) -------------------------------------------

from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter  # noqa: E402
from tck.reference import Conventions  # noqa: E402


def _stablelm_config(config) -> StableLmConfig:
    return StableLmConfig(
        vocab_size=config.vocab_size, intermediate_size=config.d_ff, hidden_size=config.d_model,
        num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads or config.n_heads, max_position_embeddings=config.max_len,
        use_qkv_bias=True, partial_rotary_factor=1.0, hidden_dropout=0.1, attention_dropout=0.1,
    )


def _glue(x, key_padding, positions, cache):
    """What StableLmModel.forward does before its layers, for a layer or attention alone."""
    past = cache.get_seq_length() if cache is not None else 0
    cache_position = torch.arange(past, past + x.shape[1], device=x.device)
    position_ids = positions if positions is not None else cache_position.unsqueeze(0)
    mask = None if key_padding is None else key_padding.to(x.dtype)
    return _update_causal_mask(mask, x, cache_position, past + x.shape[1]), position_ids


def _call_alone(module, x, key_padding=None, positions=None, cache=None, attention=False):
    mask, position_ids = _glue(x, key_padding, positions, cache)
    if attention:
        return module(x, attention_mask=mask, position_ids=position_ids, past_key_value=cache)
    return module(x, attention_mask=mask, position_ids=position_ids, past_key_value=cache)


def _alone_step(attention):
    def step(module, cache, x, key_padding=None, positions=None):
        cache = cache if cache is not None else DynamicCache()
        out = _call_alone(module, x, key_padding, positions, cache, attention)
        return out, cache
    return step


def _lm_forward(model, ids, key_padding=None, positions=None):
    mask = None if key_padding is None else key_padding.long()
    return model(ids, attention_mask=mask, position_ids=positions)[0]


def _lm_step(model, cache, ids, key_padding=None, positions=None):
    mask = None if key_padding is None else key_padding.long()
    cache = cache if cache is not None else DynamicCache()
    logits, cache = model(ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True)
    return logits, cache


def _attn_map(prefix):
    out = {f"{prefix}{n}.weight": f"{n}_proj.weight" for n in "qkvo"}
    out |= {f"{prefix}{n}.bias": f"{n}_proj.bias" for n in "qkv"}
    return out


def _block_map(prefix="", mine=""):
    out = {k: f"{mine}self_attn.{v}" for k, v in _attn_map(f"{prefix}self_attn.").items()}
    out |= {f"{prefix}ffn.{n}.weight": f"{mine}mlp.{n}_proj.weight" for n in ("gate", "up", "down")}
    for p in ("weight", "bias"):
        out[f"{prefix}norm1.{p}"] = f"{mine}input_layernorm.{p}"
        out[f"{prefix}norm2.{p}"] = f"{mine}post_attention_layernorm.{p}"
    return out


def _lm_map(config):
    out = {"embedding.weight": "model.embed_tokens.weight", "lm_head.weight": "lm_head.weight"}
    for i in range(config.n_layers):
        out |= _block_map(f"layers.{i}.", f"model.layers.{i}.")
    out |= {"norm.weight": "model.norm.weight", "norm.bias": "model.norm.bias"}
    return out


_CONVENTIONS = Conventions(
    norm_placement="pre", positions="rope", rope_layout="half_split", ffn_kind="gated",
    gate_activation="silu", embedding_scale="none", eps=1e-5, fully_masked_rows="uniform",
)
_BIASES = {"attention": True, "attention_out": False, "ffn": False}
_CONFIG = {"attention_bias": True, "attention_out_bias": False, "ffn_bias": False}

adapter = TorchModuleAdapter("stablelm-decoder", [
    TorchEntry(
        "gated_ffn",
        make=lambda config: StableLmMLP(_stablelm_config(config)),
        forward=lambda mlp, x: mlp(x),
        param_map={f"{n}.weight": f"{n}_proj.weight" for n in ("gate", "up", "down")},
        conventions=Conventions(gate_activation="silu"),
        config={"ffn_bias": False},
        supports=ConfigSpace(biases={"ffn": False}),
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: StableLmAttention(_stablelm_config(config), layer_idx=0),
        forward=lambda attn, x, key_padding=None, positions=None: _call_alone(attn, x, key_padding, positions, None, True),
        step=_alone_step(True),
        param_map=_attn_map(""),
        conventions=_CONVENTIONS,
        config=_CONFIG,
        supports=ConfigSpace(split_heads=True, max_len=512, biases=_BIASES),
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: StableLmDecoderLayer(_stablelm_config(config), layer_idx=0),
        forward=lambda block, x, key_padding=None, positions=None: _call_alone(block, x, key_padding, positions),
        step=_alone_step(False),
        param_map=_block_map(),
        conventions=_CONVENTIONS,
        config=_CONFIG,
        supports=ConfigSpace(split_heads=True, max_len=512, biases=_BIASES),
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: StableLmForCausalLM(_stablelm_config(config)),
        forward=_lm_forward,
        step=_lm_step,
        param_map=_lm_map,
        conventions=_CONVENTIONS,
        config={**_CONFIG, "tie_weights": False},
        supports=ConfigSpace(split_heads=True, max_len=512, biases=_BIASES, tied=False),
        derives_positions=True,
    ),
])
