# fmt: off
# ruff: noqa
"""GPT-2 written the way transformers' modeling_gpt2 (and nanoGPT's from_pretrained port) write it.

Conv1D layers keep their weight as [in, out] (``x @ weight + bias``, the TF checkpoint layout),
the attention's query, key and value come from one fused ``c_attn`` split along the last axis,
the causal mask is a registered ``bias`` buffer of ``tril(ones)`` sliced bottom-right by the
past length, the padding mask is HF's additive ``(1 - mask) * finfo.min``, the KV cache is a
tuple ``layer_past = (key, value)`` per layer grown with ``torch.cat``, positions are a learned
``wpe`` table (derived from the past length when none are given), the MLP uses ``gelu_new``
and the LM head is tied to ``wte``.
"""
import math

import torch
from torch import nn

from tck.adapters import Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


class Conv1D(nn.Module):
    """Basically a Linear layer whose weight is transposed: [nx, nf]."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        max_positions = config.max_len
        self.register_buffer(
            "bias",
            torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)).view(
                1, 1, max_positions, max_positions
            ),
            persistent=False,
        )
        self.embed_dim = config.d_model
        self.num_heads = config.n_heads
        self.head_dim = self.embed_dim // self.num_heads
        self.split_size = self.embed_dim
        self.scale_attn_weights = True
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)

    def _split_heads(self, tensor, num_heads, attn_head_size):
        new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
        tensor = tensor.view(new_shape)
        return tensor.permute(0, 2, 1, 3)  # (batch, head, seq_length, head_features)

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (num_heads * attn_head_size,)
        return tensor.view(new_shape)

    def _attn(self, query, key, value, attention_mask=None):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        if self.scale_attn_weights:
            attn_weights = attn_weights / torch.full(
                [], value.size(-1) ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device
            )
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype, device=attn_weights.device)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        if attn_weights.dtype in (torch.float16, torch.bfloat16):
            attn_weights = nn.functional.softmax(attn_weights.float(), dim=-1).type(value.dtype)
        else:
            attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = self.attn_dropout(attn_weights)
        attn_output = torch.matmul(attn_weights, value)
        return attn_output, attn_weights

    def forward(self, hidden_states, layer_past=None, attention_mask=None, use_cache=False):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        if layer_past is not None:
            past_key, past_value = layer_past
            key = torch.cat((past_key, key), dim=-2)
            value = torch.cat((past_value, value), dim=-2)
        present = (key, value) if use_cache else None
        attn_output, attn_weights = self._attn(query, key, value, attention_mask)
        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        attn_output = self.c_proj(attn_output)
        attn_output = self.resid_dropout(attn_output)
        return attn_output, present


class GPT2MLP(nn.Module):
    def __init__(self, intermediate_size, config):
        super().__init__()
        embed_dim = config.d_model
        self.c_fc = Conv1D(intermediate_size, embed_dim)
        self.c_proj = Conv1D(embed_dim, intermediate_size)
        self.act = gelu_new
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states):
        hidden_states = self.c_fc(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.c_proj(hidden_states)
        return self.dropout(hidden_states)


class GPT2Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        hidden_size = config.d_model
        inner_dim = config.d_ff
        self.ln_1 = nn.LayerNorm(hidden_size, eps=1e-5)
        self.attn = GPT2Attention(config)
        self.ln_2 = nn.LayerNorm(hidden_size, eps=1e-5)
        self.mlp = GPT2MLP(inner_dim, config)

    def forward(self, hidden_states, layer_past=None, attention_mask=None, use_cache=False):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_output, present = self.attn(
            hidden_states, layer_past=layer_past, attention_mask=attention_mask, use_cache=use_cache
        )
        hidden_states = attn_output + residual
        residual = hidden_states
        hidden_states = self.ln_2(hidden_states)
        feed_forward_hidden_states = self.mlp(hidden_states)
        hidden_states = residual + feed_forward_hidden_states
        return hidden_states, present


def extended_attention_mask(attention_mask, dtype):
    # [B, T] keep-mask -> additive [B, 1, 1, T]: 0 where kept, finfo.min where padded
    attention_mask = attention_mask[:, None, None, :]
    attention_mask = attention_mask.to(dtype=dtype)
    return (1.0 - attention_mask) * torch.finfo(dtype).min


class GPT2Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_dim = config.d_model
        self.wte = nn.Embedding(config.vocab_size, self.embed_dim)
        self.wpe = nn.Embedding(config.max_len, self.embed_dim)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([GPT2Block(config) for _ in range(config.n_layers)])
        self.ln_f = nn.LayerNorm(self.embed_dim, eps=1e-5)

    def forward(self, input_ids, past_key_values=None, attention_mask=None, position_ids=None, use_cache=False):
        input_shape = input_ids.size()
        if past_key_values is None:
            past_length = 0
            past_key_values = tuple([None] * len(self.h))
        else:
            past_length = past_key_values[0][0].size(-2)
        if position_ids is None:
            position_ids = torch.arange(past_length, input_shape[-1] + past_length, dtype=torch.long)
            position_ids = position_ids.unsqueeze(0)
        if attention_mask is not None:
            attention_mask = extended_attention_mask(attention_mask, self.wte.weight.dtype)
        inputs_embeds = self.wte(input_ids)
        position_embeds = self.wpe(position_ids)
        hidden_states = inputs_embeds + position_embeds
        hidden_states = self.drop(hidden_states)
        presents = () if use_cache else None
        for block, layer_past in zip(self.h, past_key_values):
            hidden_states, present = block(
                hidden_states, layer_past=layer_past, attention_mask=attention_mask, use_cache=use_cache
            )
            if use_cache:
                presents = presents + (present,)
        hidden_states = self.ln_f(hidden_states)
        return hidden_states, presents


class GPT2LMHeadModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.transformer = GPT2Model(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tie_weights()

    def forward(self, input_ids, past_key_values=None, attention_mask=None, position_ids=None, use_cache=False):
        hidden_states, presents = self.transformer(
            input_ids, past_key_values=past_key_values, attention_mask=attention_mask,
            position_ids=position_ids, use_cache=use_cache,
        )
        lm_logits = self.lm_head(hidden_states)
        return lm_logits, presents


# ---- the adapter ----

def _conv1d(name):  # a Conv1D weight [in, out] is the canonical [out, in] transposed
    return Param(f"{name}.weight", permute=(1, 0))


def _attn_map(prefix, config):
    D = config.d_model
    out = {}
    for i, n in enumerate("qkv"):
        out[f"{n}.weight"] = Param(f"{prefix}c_attn.weight", slice=(1, i * D, (i + 1) * D), permute=(1, 0))
        out[f"{n}.bias"] = Param(f"{prefix}c_attn.bias", slice=(0, i * D, (i + 1) * D))
    out["o.weight"] = _conv1d(f"{prefix}c_proj")
    out["o.bias"] = f"{prefix}c_proj.bias"
    return out


def _block_map(prefix, config):
    out = {f"self_attn.{k}": v for k, v in _attn_map(f"{prefix}attn.", config).items()}
    for canon, mine in (("norm1", "ln_1"), ("norm2", "ln_2")):
        out[f"{canon}.weight"] = f"{prefix}{mine}.weight"
        out[f"{canon}.bias"] = f"{prefix}{mine}.bias"
    out["ffn.fc1.weight"] = _conv1d(f"{prefix}mlp.c_fc")
    out["ffn.fc1.bias"] = f"{prefix}mlp.c_fc.bias"
    out["ffn.fc2.weight"] = _conv1d(f"{prefix}mlp.c_proj")
    out["ffn.fc2.bias"] = f"{prefix}mlp.c_proj.bias"
    return out


def _lm_map(config):
    out = {"embedding.weight": "transformer.wte.weight", "pos_embedding.weight": "transformer.wpe.weight"}
    for i in range(config.n_layers):
        out |= {f"layers.{i}.{k}": v for k, v in _block_map(f"transformer.h.{i}.", config).items()}
    out["norm.weight"] = "transformer.ln_f.weight"
    out["norm.bias"] = "transformer.ln_f.bias"
    return out


def _mask(key_padding):
    return None if key_padding is None else torch.as_tensor(key_padding, dtype=torch.bool)


def _attn_forward(attn, x, key_padding=None, positions=None):
    mask = _mask(key_padding)
    mask = None if mask is None else extended_attention_mask(mask, x.dtype)
    return attn(x, attention_mask=mask)[0]


def _attn_step(attn, cache, x, key_padding=None, positions=None):
    mask = _mask(key_padding)
    mask = None if mask is None else extended_attention_mask(mask, x.dtype)
    out, present = attn(x, layer_past=cache, attention_mask=mask, use_cache=True)
    return out, present


def _block_forward(block, x, key_padding=None, positions=None):
    mask = _mask(key_padding)
    mask = None if mask is None else extended_attention_mask(mask, x.dtype)
    return block(x, attention_mask=mask)[0]


def _block_step(block, cache, x, key_padding=None, positions=None):
    mask = _mask(key_padding)
    mask = None if mask is None else extended_attention_mask(mask, x.dtype)
    return block(x, layer_past=cache, attention_mask=mask, use_cache=True)


def _lm_forward(model, ids, key_padding=None, positions=None):
    pos = None if positions is None else torch.as_tensor(positions, dtype=torch.long)
    return model(torch.as_tensor(ids, dtype=torch.long), attention_mask=_mask(key_padding), position_ids=pos)[0]


def _lm_step(model, cache, ids, key_padding=None, positions=None):
    pos = None if positions is None else torch.as_tensor(positions, dtype=torch.long)
    return model(
        torch.as_tensor(ids, dtype=torch.long), past_key_values=cache, attention_mask=_mask(key_padding),
        position_ids=pos, use_cache=True,
    )


GPT2 = Conventions(
    norm_placement="pre", activation="gelu_tanh", embedding_scale="none", positions="learned",
    fully_masked_rows="undefined",
)
NOTES = ("HF GPT-2: a fully padded query row gets finfo.min everywhere; its output is not promised",)

adapter = TorchModuleAdapter("hf_gpt2", [
    TorchEntry(
        "causal_self_attention", make=GPT2Attention, forward=_attn_forward, step=_attn_step,
        param_map=lambda config: _attn_map("", config), conventions=GPT2, notes=NOTES,
    ),
    TorchEntry(
        "decoder_block", make=GPT2Block, forward=_block_forward, step=_block_step,
        param_map=lambda config: _block_map("", config), conventions=GPT2, notes=NOTES,
    ),
    TorchEntry(
        "causal_lm", make=GPT2LMHeadModel, forward=_lm_forward, step=_lm_step,
        param_map=_lm_map, conventions=GPT2, notes=NOTES, derives_positions=True,
    ),
])
