# fmt: off
# ruff: noqa
"""A GPTBigCode (SantaCoder / StarCoder) decoder as transformers' modeling_gpt_bigcode.py writes
it (eager attention): multi-query attention with a fused c_attn, one fused key_value cache
tensor per layer, baddbmm/bmm attention, learned positions, a head tied to wte. Written for the
thirteenth blind benchmark of transformer-tck."""

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import DECODER_CANONICAL


@dataclasses.dataclass
class GPTBigCodeConfig:
    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int = None
    activation_function: str = "gelu_pytorch_tanh"
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    layer_norm_epsilon: float = 1e-5
    scale_attn_weights: bool = True
    attention_softmax_in_fp32: bool = True
    scale_attention_softmax_in_fp32: bool = True
    multi_query: bool = True


def upcast_masked_softmax(x, mask, mask_value, scale, softmax_dtype):
    input_dtype = x.dtype
    x = x.to(softmax_dtype) * scale
    x = torch.where(mask, x, mask_value)
    x = torch.nn.functional.softmax(x, dim=-1).to(input_dtype)
    return x


def upcast_softmax(x, scale, softmax_dtype):
    input_dtype = x.dtype
    x = x.to(softmax_dtype) * scale
    x = torch.nn.functional.softmax(x, dim=-1).to(input_dtype)
    return x


def masked_softmax(x, mask, mask_value):
    x = torch.where(mask, x, mask_value)
    x = torch.nn.functional.softmax(x, dim=-1)
    return x


def gelu_pytorch_tanh(x):
    return F.gelu(x, approximate="tanh")


ACT2FN = {"gelu_pytorch_tanh": gelu_pytorch_tanh, "gelu": F.gelu, "relu": F.relu}


class GPTBigCodeAttention(nn.Module):
    def __init__(self, config, layer_idx=None):
        super().__init__()
        self.mask_value = None
        self.multi_query = config.multi_query
        self.embed_dim = config.n_embd
        self.num_heads = config.n_head
        self.head_dim = self.embed_dim // self.num_heads
        self.kv_heads = 1 if self.multi_query else self.num_heads
        self.kv_dim = self.kv_heads * self.head_dim
        self.split_size = self.embed_dim
        if self.head_dim * self.num_heads != self.embed_dim:
            raise ValueError(f"`embed_dim` must be divisible by num_heads (got `embed_dim`: {self.embed_dim} and `num_heads`: {self.num_heads}).")
        self.scale_attn_weights = config.scale_attn_weights
        self.layer_idx = layer_idx
        self.attention_softmax_in_fp32 = config.attention_softmax_in_fp32
        self.scale_attention_softmax_in_fp32 = config.scale_attention_softmax_in_fp32 and config.attention_softmax_in_fp32
        self.c_attn = nn.Linear(self.embed_dim, self.embed_dim + 2 * self.kv_dim)
        self.c_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def _get_mask_value(self, device, dtype):
        # torch.where expects a tensor. We use a cache to avoid recreating it every time.
        if self.mask_value is None or self.mask_value.dtype != dtype or self.mask_value.device != device:
            self.mask_value = torch.full([], torch.finfo(dtype).min, dtype=dtype, device=device)
        return self.mask_value

    def _attn(self, query, key, value, attention_mask=None, head_mask=None):
        dtype = query.dtype
        softmax_dtype = torch.float32 if self.attention_softmax_in_fp32 and dtype in (torch.float16, torch.bfloat16) else dtype
        upcast = dtype != softmax_dtype
        unscale = self.layer_idx + 1 if self.scale_attention_softmax_in_fp32 and upcast else 1
        scale_factor = unscale**-1
        if self.scale_attn_weights:
            scale_factor /= self.head_dim**0.5
        # MQA models: (batch_size, query_length, num_heads * head_dim)
        query_shape = query.shape
        batch_size = query_shape[0]
        key_length = key.size(-1)
        if self.multi_query:
            # (batch_size, query_length, num_heads, head_dim) x (batch_size, head_dim, key_length)
            # -> (batch_size, query_length, num_heads, key_length)
            query_length = query_shape[1]
            attn_shape = (batch_size, query_length, self.num_heads, key_length)
            attn_view = (batch_size, query_length * self.num_heads, key_length)
            # No copy needed for MQA 2, or when layer_past is provided.
            query = query.reshape(batch_size, query_length * self.num_heads, self.head_dim)
        else:
            query_length = query_shape[2]
            attn_shape = (batch_size, self.num_heads, query_length, key_length)
            attn_view = (batch_size * self.num_heads, query_length, key_length)
            query = query.reshape(batch_size * self.num_heads, query_length, self.head_dim)
            key = key.reshape(batch_size * self.num_heads, self.head_dim, key_length)
        attn_weights = torch.empty(attn_view, device=query.device, dtype=query.dtype)
        if query.device.type == "cpu":
            # This is needed because of a bug in pytorch https://github.com/pytorch/pytorch/issues/80588.
            # The bug was fixed in https://github.com/pytorch/pytorch/pull/96086,
            # but the fix has not been released as of pytorch version 2.0.0.
            attn_weights = torch.zeros_like(attn_weights)
            beta = 1
        else:
            beta = 0
        attn_weights = torch.baddbmm(attn_weights, query, key, beta=beta, alpha=scale_factor).view(attn_shape)
        if upcast:
            # Use a fused kernel to prevent a large overhead from casting and scaling.
            # Sub-optimal when the key length is not a multiple of 8.
            if attention_mask is None:
                attn_weights = upcast_softmax(attn_weights, unscale, softmax_dtype)
            else:
                mask_value = self._get_mask_value(attn_weights.device, softmax_dtype)
                attn_weights = upcast_masked_softmax(attn_weights, attention_mask, mask_value, unscale, softmax_dtype)
        else:
            if attention_mask is not None:
                mask_value = self._get_mask_value(attn_weights.device, softmax_dtype)
                # The fused kernel is very slow when the key length is not a multiple of 8, so we skip fusion.
                attn_weights = torch.where(attention_mask, attn_weights, mask_value)
            attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = self.attn_dropout(attn_weights)
        # Mask heads if we want to
        if head_mask is not None:
            if self.multi_query:
                head_mask = head_mask.transpose(1, 2)
            attn_weights = attn_weights * head_mask
        if self.multi_query:
            attn_output = torch.bmm(attn_weights.view(attn_view), value).view(query_shape)
        else:
            attn_output = torch.matmul(attn_weights, value)
        return attn_output, attn_weights

    def forward(self, hidden_states, layer_past=None, attention_mask=None, head_mask=None, use_cache=False, output_attentions=False):
        if self.multi_query:
            query, key_value = self.c_attn(hidden_states).split((self.embed_dim, 2 * self.kv_dim), dim=2)
        else:
            # Note: We split as (self.num_heads, 3, self.head_dim) instead of (3, self.num_heads, self.head_dim),
            # i.e., the memory layout is not the same as GPT2.
            # This makes the concatenation with past_key_value more efficient.
            query, key_value = (
                self.c_attn(hidden_states)
                .view(*hidden_states.shape[:2], self.num_heads, 3 * self.head_dim)
                .transpose(1, 2)
                .split((self.head_dim, 2 * self.head_dim), dim=3)
            )
        if layer_past is not None:
            key_value = torch.cat((layer_past, key_value), dim=-2)
        present = key_value if use_cache else None
        key, value = key_value.split((self.head_dim, self.head_dim), dim=-1)
        attn_output, attn_weights = self._attn(query, key.transpose(-1, -2), value, attention_mask, head_mask)
        if not self.multi_query:
            attn_output = attn_output.transpose(1, 2).reshape(hidden_states.shape)
        attn_output = self.c_proj(attn_output)
        attn_output = self.resid_dropout(attn_output)
        outputs = (attn_output, present)
        if output_attentions:
            if self.multi_query:
                # Transpose to return weights in the usual format (batch_size, num_heads, query_length, key_length)
                attn_weights = attn_weights.transpose(1, 2)
            outputs += (attn_weights,)
        return outputs  # a, present, (attentions)


class GPTBigCodeMLP(nn.Module):
    def __init__(self, intermediate_size, config):
        super().__init__()
        embed_dim = config.n_embd
        self.c_fc = nn.Linear(embed_dim, intermediate_size)
        self.c_proj = nn.Linear(intermediate_size, embed_dim)
        self.act = ACT2FN[config.activation_function]
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, hidden_states):
        hidden_states = self.c_fc(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.c_proj(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states


class GPTBigCodeBlock(nn.Module):
    def __init__(self, config, layer_idx=None):
        super().__init__()
        hidden_size = config.n_embd
        self.inner_dim = config.n_inner if config.n_inner is not None else 4 * hidden_size
        self.ln_1 = nn.LayerNorm(hidden_size, eps=config.layer_norm_epsilon)
        self.attn = GPTBigCodeAttention(config, layer_idx=layer_idx)
        self.ln_2 = nn.LayerNorm(hidden_size, eps=config.layer_norm_epsilon)
        self.mlp = GPTBigCodeMLP(self.inner_dim, config)

    def forward(self, hidden_states, layer_past=None, attention_mask=None, head_mask=None, use_cache=False, output_attentions=False):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_outputs = self.attn(hidden_states, layer_past=layer_past, attention_mask=attention_mask, head_mask=head_mask, use_cache=use_cache, output_attentions=output_attentions)
        attn_output = attn_outputs[0]  # output_attn: a, present, (attentions)
        outputs = attn_outputs[1:]
        # residual connection
        hidden_states = attn_output + residual
        residual = hidden_states
        hidden_states = self.ln_2(hidden_states)
        feed_forward_hidden_states = self.mlp(hidden_states)
        # residual connection
        hidden_states = residual + feed_forward_hidden_states
        if use_cache:
            outputs = (hidden_states,) + outputs
        else:
            outputs = (hidden_states,) + outputs[1:]
        return outputs  # hidden_states, present, (attentions)


def self_attention_mask(bias, query_length, key_length, attention_mask, batch_size, multi_query):
    """GPTBigCodeModel.forward's mask: the causal rows of the `bias` buffer for the new queries
    over every key, and-ed with the padding mask; a head axis where _attn wants it."""
    mask = bias[None, key_length - query_length : key_length, :key_length]
    if attention_mask is not None:
        mask = mask * attention_mask.view(batch_size, 1, -1).to(dtype=torch.bool, device=mask.device)
    # MQA models: (batch_size, query_length, n_heads, key_length)
    # MHA models: (batch_size, n_heads, query_length, key_length)
    return mask.unsqueeze(2 if multi_query else 1)


class GPTBigCodeModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.multi_query = config.multi_query
        self.embed_dim = config.n_embd
        self.wte = nn.Embedding(config.vocab_size, self.embed_dim)
        self.wpe = nn.Embedding(config.n_positions, self.embed_dim)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList([GPTBigCodeBlock(config, layer_idx=i) for i in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(self.embed_dim, eps=config.layer_norm_epsilon)
        max_positions = config.n_positions
        self.register_buffer("bias", torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)), persistent=False)

    def forward(self, input_ids, past_key_values=None, attention_mask=None, position_ids=None, use_cache=False):
        input_shape = input_ids.size()
        input_ids = input_ids.view(-1, input_shape[-1])
        batch_size = input_ids.shape[0]
        if batch_size <= 0:
            raise ValueError("batch_size has to be defined and > 0")
        if past_key_values is None:
            past_length = 0
            past_key_values = tuple([None] * len(self.h))
        else:
            past_length = past_key_values[0].size(-2)
        if position_ids is None:
            position_ids = torch.arange(past_length, input_shape[-1] + past_length, dtype=torch.long, device=input_ids.device)
            position_ids = position_ids.unsqueeze(0)
        # Self-attention mask.
        query_length = input_shape[-1]
        key_length = past_length + query_length
        if key_length > self.bias.shape[-1]:
            raise ValueError(f"sequence of {key_length} tokens, longer than n_positions {self.bias.shape[-1]}")
        attention_mask = self_attention_mask(self.bias, query_length, key_length, attention_mask, batch_size, self.multi_query)
        inputs_embeds = self.wte(input_ids)
        position_embeds = self.wpe(position_ids)
        hidden_states = inputs_embeds + position_embeds
        hidden_states = self.drop(hidden_states)
        presents = [] if use_cache else None
        for i, (block, layer_past) in enumerate(zip(self.h, past_key_values)):
            outputs = block(hidden_states, layer_past=layer_past, attention_mask=attention_mask, use_cache=use_cache)
            hidden_states = outputs[0]
            if use_cache:
                presents.append(outputs[1])
        hidden_states = self.ln_f(hidden_states)
        return hidden_states, presents


class GPTBigCodeForCausalLM(nn.Module):
    _tied_weights_keys = ["lm_head.weight"]

    def __init__(self, config):
        super().__init__()
        self.transformer = GPTBigCodeModel(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.tie_weights()

    def tie_weights(self):
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, input_ids, past_key_values=None, attention_mask=None, position_ids=None, use_cache=False):
        hidden_states, presents = self.transformer(input_ids, past_key_values=past_key_values, attention_mask=attention_mask, position_ids=position_ids, use_cache=use_cache)
        lm_logits = self.lm_head(hidden_states)
        return lm_logits, presents


class CausalSublayer(nn.Module):
    """An attention module or a block driven as GPTBigCodeModel drives its layers: the causal
    `bias` buffer, the padding mask, the fused key_value cache of the layer."""

    def __init__(self, inner, config):
        super().__init__()
        self.inner = inner
        self.multi_query = config.multi_query
        self.register_buffer("bias", torch.tril(torch.ones((config.n_positions, config.n_positions), dtype=torch.bool)), persistent=False)

    def forward(self, hidden_states, layer_past=None, attention_mask=None, use_cache=False):
        batch_size, query_length = hidden_states.shape[:2]
        past_length = 0 if layer_past is None else layer_past.size(-2)
        key_length = past_length + query_length
        if key_length > self.bias.shape[-1]:
            raise ValueError(f"sequence of {key_length} tokens, longer than n_positions {self.bias.shape[-1]}")
        mask = self_attention_mask(self.bias, query_length, key_length, attention_mask, batch_size, self.multi_query)
        outputs = self.inner(hidden_states, layer_past=layer_past, attention_mask=mask, use_cache=use_cache)
        return outputs[0], (outputs[1] if use_cache else None)


# ---- the adapter ----

def _config(config, n_layer=None):
    return GPTBigCodeConfig(
        vocab_size=config.vocab_size,
        n_positions=config.max_len,
        n_embd=config.d_model,
        n_layer=config.n_layers if n_layer is None else n_layer,
        n_head=config.n_heads,
        n_inner=config.d_ff,
        multi_query=True,
    )


def _forward_lm(model, ids, key_padding=None, positions=None):
    logits, _ = model(ids, attention_mask=key_padding, position_ids=positions)
    return logits


def _step_lm(model, cache, ids, key_padding=None, positions=None):
    logits, presents = model(ids, past_key_values=cache, attention_mask=key_padding, position_ids=positions, use_cache=True)
    return logits, presents


def _forward_sub(sub, x, key_padding=None, positions=None):
    out, _ = sub(x, attention_mask=key_padding)
    return out


def _step_sub(sub, cache, x, key_padding=None, positions=None):
    return sub(x, layer_past=cache, attention_mask=key_padding, use_cache=True)


def _attn_map(config, mine="inner."):
    D, hd = config.d_model, config.d_model // config.n_heads
    out = {}
    for p, dim in (("weight", 0), ("bias", 0)):
        out[f"q.{p}"] = Param(f"{mine}c_attn.{p}", slice=(dim, 0, D))
        out[f"k.{p}"] = Param(f"{mine}c_attn.{p}", slice=(dim, D, D + hd))
        out[f"v.{p}"] = Param(f"{mine}c_attn.{p}", slice=(dim, D + hd, D + 2 * hd))
        out[f"o.{p}"] = f"{mine}c_proj.{p}"
    return out


def _block_map(config, canon="", mine="inner."):
    out = {f"{canon}self_attn.{k}": v for k, v in _attn_map(config, f"{mine}attn.").items()}
    for p in ("weight", "bias"):
        out[f"{canon}norm1.{p}"] = f"{mine}ln_1.{p}"
        out[f"{canon}norm2.{p}"] = f"{mine}ln_2.{p}"
        out[f"{canon}ffn.fc1.{p}"] = f"{mine}mlp.c_fc.{p}"
        out[f"{canon}ffn.fc2.{p}"] = f"{mine}mlp.c_proj.{p}"
    return out


def _lm_map(config):
    out = {"embedding.weight": "transformer.wte.weight", "pos_embedding.weight": "transformer.wpe.weight"}
    for i in range(config.n_layers):
        out |= _block_map(config, f"layers.{i}.", f"transformer.h.{i}.")
    out |= {"norm.weight": "transformer.ln_f.weight", "norm.bias": "transformer.ln_f.bias"}
    return out


CONVENTIONS = dataclasses.replace(DECODER_CANONICAL, eps=1e-5, fully_masked_rows="uniform")
FIXED = {"n_kv_heads": 1, "bias": True, "tie_weights": True}
SPACE = ConfigSpace(split_heads=True, tied=True, max_len=1024)

adapter = TorchModuleAdapter("gpt-bigcode", [
    TorchEntry(
        "layer_norm",
        make=lambda config: nn.LayerNorm(config.d_model, eps=GPTBigCodeConfig.layer_norm_epsilon),
        forward=lambda norm, x: norm(x),
        conventions=dataclasses.replace(CONVENTIONS, fully_masked_rows="zero"),
    ),
    TorchEntry(
        "ffn",
        make=lambda config: GPTBigCodeMLP(config.d_ff, _config(config)),
        forward=lambda mlp, x: mlp(x),
        param_map={f"fc{i}.{p}": f"c_{n}.{p}" for i, n in ((1, "fc"), (2, "proj")) for p in ("weight", "bias")},
        conventions=dataclasses.replace(CONVENTIONS, fully_masked_rows="zero"),
        config={"bias": True},
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: CausalSublayer(GPTBigCodeAttention(_config(config), layer_idx=0), _config(config)),
        forward=_forward_sub,
        step=_step_sub,
        param_map=_attn_map,
        conventions=CONVENTIONS,
        config=FIXED,
        supports=SPACE,
        derives_positions=True,
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: CausalSublayer(GPTBigCodeBlock(_config(config), layer_idx=1), _config(config)),
        forward=_forward_sub,
        step=_step_sub,
        param_map=_block_map,
        conventions=CONVENTIONS,
        config=FIXED,
        supports=SPACE,
        derives_positions=True,
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: GPTBigCodeForCausalLM(_config(config)),
        forward=_forward_lm,
        step=_step_lm,
        param_map=_lm_map,
        conventions=CONVENTIONS,
        config=FIXED,
        supports=SPACE,
        derives_positions=True,
    ),
])
