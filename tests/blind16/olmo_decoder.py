# fmt: off
# ruff: noqa
"""A decoder-only language model as AI2's OLMo writes it (allenai/OLMo, olmo/model.py):
one fused ``att_proj`` (q, k, v split by ``fused_dims``), ``attn_out``, one fused ``ff_proj``
(a SwiGLU whose gate is the SECOND half), ``ff_out``, half-split RoPE from a
``RotaryEmbedding`` with cached sin/cos, pre-LN LayerNorm, a tied output head, a KV cache
kept as ``layer_past = (k, v)`` and the causal mask as an additive bias."""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelConfig:
    d_model: int = 32
    n_heads: int = 4
    mlp_hidden_size: int = 128
    n_layers: int = 2
    vocab_size: int = 40
    max_sequence_length: int = 512
    rope_theta: float = 10000.0
    layer_norm_eps: float = 1e-5
    include_bias: bool = True


def _compute_dtype(dtype):
    return torch.promote_types(dtype, torch.float32)


class LayerNorm(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.eps = config.layer_norm_eps
        self.normalized_shape = (config.d_model,)
        self.weight = nn.Parameter(torch.ones(config.d_model))
        self.bias = nn.Parameter(torch.zeros(config.d_model))

    def forward(self, x):
        og_dtype = x.dtype
        x = x.to(_compute_dtype(og_dtype))
        out = F.layer_norm(x, self.normalized_shape, weight=None, bias=None, eps=self.eps)
        return self.weight * out.to(og_dtype) + self.bias


class RotaryEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dim = config.d_model // config.n_heads
        self.rope_theta = config.rope_theta
        self.__cache = {}

    def get_rotary_embedding(self, seq_len, device):
        if "rope_pos_sin" in self.__cache and self.__cache["rope_pos_sin"].shape[-2] >= seq_len:
            return self.__cache["rope_pos_sin"][:, :, :seq_len, :], self.__cache["rope_pos_cos"][:, :, :seq_len, :]
        dim = self.dim
        inv_freq = 1.0 / (self.rope_theta ** (torch.arange(0, dim, 2, device=device, dtype=torch.float64) / dim))
        seq = torch.arange(seq_len, device=device, dtype=torch.float64)
        freqs = torch.einsum("i , j -> i j", seq, inv_freq)
        positions = torch.cat((freqs, freqs), dim=-1)
        pos_sin, pos_cos = positions.sin()[None, None, :, :], positions.cos()[None, None, :, :]
        self.__cache["rope_pos_sin"] = pos_sin
        self.__cache["rope_pos_cos"] = pos_cos
        return pos_sin, pos_cos

    def rotate_half(self, x):
        B, nh, T, hs = x.size()
        x = x.view(B, nh, T, 2, hs // 2)
        x1, x2 = x.unbind(dim=-2)
        return torch.cat((-x2, x1), dim=-1)

    def apply_rotary_pos_emb(self, pos_sin, pos_cos, t):
        return ((t * pos_cos) + (self.rotate_half(t) * pos_sin)).to(t.dtype)

    def forward(self, q, k):
        q_, k_ = q.to(_compute_dtype(q.dtype)), k.to(_compute_dtype(k.dtype))
        query_len, key_len = q_.shape[-2], k_.shape[-2]
        pos_sin, pos_cos = self.get_rotary_embedding(key_len, q_.device)
        pos_sin = pos_sin.type_as(q_)
        pos_cos = pos_cos.type_as(q_)
        q_ = self.apply_rotary_pos_emb(pos_sin[:, :, key_len - query_len : key_len, :], pos_cos[:, :, key_len - query_len : key_len, :], q_)
        k_ = self.apply_rotary_pos_emb(pos_sin, pos_cos, k_)
        return q_.type_as(q), k_.type_as(k)


class SwiGLU(nn.Module):
    def forward(self, x):
        x, gate = x.chunk(2, dim=-1)
        return F.silu(gate) * x


def causal_attention_bias(seq_len, device, dtype):
    att_bias = torch.triu(torch.ones(seq_len, seq_len, device=device, dtype=dtype), diagonal=1) * torch.finfo(dtype).min
    return att_bias.view(1, 1, seq_len, seq_len)


def ensure_finite_(x, check_neg_inf=True, check_pos_inf=False):
    if check_neg_inf:
        x.masked_fill_(x == float("-inf"), torch.finfo(x.dtype).min)
    if check_pos_inf:
        x.masked_fill_(x == float("inf"), torch.finfo(x.dtype).max)


class OLMoBlock(nn.Module):
    def __init__(self, layer_id, config):
        super().__init__()
        self.layer_id = layer_id
        self.config = config
        self.hidden_size = config.mlp_hidden_size
        head_dim = config.d_model // config.n_heads
        self.fused_dims = (config.d_model, config.n_heads * head_dim, config.n_heads * head_dim)
        self.att_proj = nn.Linear(config.d_model, sum(self.fused_dims), bias=config.include_bias)
        self.attn_out = nn.Linear(config.d_model, config.d_model, bias=config.include_bias)
        self.ff_proj = nn.Linear(config.d_model, self.hidden_size, bias=config.include_bias)
        self.act = SwiGLU()
        self.ff_out = nn.Linear(self.hidden_size // 2, config.d_model, bias=config.include_bias)
        self.attn_norm = LayerNorm(config)
        self.ff_norm = LayerNorm(config)
        self.rotary_emb = RotaryEmbedding(config)
        self.dropout = nn.Dropout(0.0)

    def _scaled_dot_product_attention(self, q, k, v, attn_mask=None):
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        if attn_mask is not None:
            att = att + attn_mask
        att = torch.softmax(att, dim=-1, dtype=_compute_dtype(att.dtype)).to(q.dtype)
        return torch.matmul(att, v)

    def attention(self, q, k, v, attention_bias=None, layer_past=None, use_cache=False):
        B, T, C = q.size()
        dtype = k.dtype
        q = q.view(B, T, self.config.n_heads, C // self.config.n_heads).transpose(1, 2)
        k = k.view(B, T, self.config.n_heads, C // self.config.n_heads).transpose(1, 2)
        v = v.view(B, T, self.config.n_heads, C // self.config.n_heads).transpose(1, 2)
        if layer_past is not None:
            past_key, past_value = layer_past
            k = torch.cat((past_key, k), dim=-2)
            v = torch.cat((past_value, v), dim=-2)
        present = (k, v) if use_cache else None
        query_len, key_len = q.shape[-2], k.shape[-2]
        q, k = self.rotary_emb(q, k)
        if attention_bias is not None:
            attention_bias = attention_bias[:, :, key_len - query_len : key_len, :key_len].to(dtype)
        att = self._scaled_dot_product_attention(q, k, v, attn_mask=attention_bias)
        att = att.transpose(1, 2).contiguous().view(B, T, C)
        return self.attn_out(att), present

    def attend(self, x, attention_bias=None, layer_past=None, use_cache=False):
        qkv = self.att_proj(x)
        q, k, v = qkv.split(self.fused_dims, dim=-1)
        return self.attention(q, k, v, attention_bias, layer_past=layer_past, use_cache=use_cache)

    def feed_forward(self, x):
        x = self.ff_proj(x)
        x = self.act(x)
        return self.ff_out(x)

    def forward(self, x, attention_bias=None, layer_past=None, use_cache=False):
        att, cache = self.attend(self.attn_norm(x), attention_bias, layer_past=layer_past, use_cache=use_cache)
        x = x + self.dropout(att)
        og_x = x
        x = self.ff_norm(x)
        x = self.feed_forward(x)
        x = self.dropout(x)
        x = og_x + x
        return x, cache


def get_attention_bias(x_len, key_len, attention_mask, device, dtype):
    bias = causal_attention_bias(key_len, device, dtype)
    if attention_mask is not None:
        attention_mask = attention_mask.to(dtype)
        attention_mask = (1.0 - attention_mask)[:, None, None, :] * torch.finfo(dtype).min
        bias = bias + attention_mask
        ensure_finite_(bias, check_neg_inf=True, check_pos_inf=False)
    return bias


class OLMo(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.d_model),
            emb_drop=nn.Dropout(0.0),
            ln_f=LayerNorm(config),
        ))
        self.transformer.update({"blocks": nn.ModuleList([OLMoBlock(i, config) for i in range(config.n_layers)])})

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=False):
        batch_size, seq_len = input_ids.size()
        past_length = 0 if past_key_values is None else past_key_values[0][0].size(-2)
        x = self.transformer.wte(input_ids)
        x = self.transformer.emb_drop(x)
        dtype = x.dtype
        attention_bias = get_attention_bias(seq_len, past_length + seq_len, attention_mask, x.device, dtype)
        attn_key_values = [] if use_cache else None
        for block_idx, block in enumerate(self.transformer.blocks):
            layer_past = None if past_key_values is None else past_key_values[block_idx]
            x, cache = block(x, attention_bias=attention_bias, layer_past=layer_past, use_cache=use_cache)
            if attn_key_values is not None:
                attn_key_values.append(cache)
        x = self.transformer.ln_f(x)
        logits = F.linear(x, self.transformer.wte.weight, None)
        return logits, attn_key_values


# ---- the adapter

from tck.adapters import Chunk, ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def _olmo_config(config):
    return ModelConfig(d_model=config.d_model, n_heads=config.n_heads, mlp_hidden_size=2 * config.d_ff, n_layers=config.n_layers, vocab_size=config.vocab_size, max_sequence_length=config.max_len)


def _keep(key_padding):
    return None if key_padding is None else torch.as_tensor(key_padding)


class AttentionOnly(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.block = OLMoBlock(0, _olmo_config(config))
        del self.block.ff_proj, self.block.ff_out, self.block.attn_norm, self.block.ff_norm

    def forward(self, x, key_padding=None, layer_past=None, use_cache=False):
        past_length = 0 if layer_past is None else layer_past[0].size(-2)
        bias = get_attention_bias(x.size(1), past_length + x.size(1), _keep(key_padding), x.device, x.dtype)
        return self.block.attend(x, bias, layer_past=layer_past, use_cache=use_cache)


class BlockOnly(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.block = OLMoBlock(0, _olmo_config(config))

    def forward(self, x, key_padding=None, layer_past=None, use_cache=False):
        past_length = 0 if layer_past is None else layer_past[0].size(-2)
        bias = get_attention_bias(x.size(1), past_length + x.size(1), _keep(key_padding), x.device, x.dtype)
        return self.block(x, bias, layer_past=layer_past, use_cache=use_cache)


class FeedForwardOnly(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.block = OLMoBlock(0, _olmo_config(config))
        del self.block.att_proj, self.block.attn_out, self.block.attn_norm, self.block.ff_norm

    def forward(self, x):
        return self.block.feed_forward(x)


def _attn_map(prefix, out_prefix=""):
    m = {}
    for p in ("weight", "bias"):
        m |= {f"{out_prefix}{n}.{p}": Chunk(f"{prefix}att_proj.{p}", i, 3) for i, n in enumerate("qkv")}
        m[f"{out_prefix}o.{p}"] = f"{prefix}attn_out.{p}"
    return m


def _ffn_map(prefix, out_prefix=""):
    m = {}
    for p in ("weight", "bias"):
        m[f"{out_prefix}up.{p}"] = Chunk(f"{prefix}ff_proj.{p}", 0, 2)
        m[f"{out_prefix}gate.{p}"] = Chunk(f"{prefix}ff_proj.{p}", 1, 2)
        m[f"{out_prefix}down.{p}"] = f"{prefix}ff_out.{p}"
    return m


def _block_map(prefix, out_prefix=""):
    m = _attn_map(prefix, out_prefix + "self_attn.") | _ffn_map(prefix, out_prefix + "ffn.")
    for p in ("weight", "bias"):
        m[f"{out_prefix}norm1.{p}"] = f"{prefix}attn_norm.{p}"
        m[f"{out_prefix}norm2.{p}"] = f"{prefix}ff_norm.{p}"
    return m


def _lm_map(config):
    m = {"embedding.weight": "transformer.wte.weight", "norm.weight": "transformer.ln_f.weight", "norm.bias": "transformer.ln_f.bias"}
    for i in range(config.n_layers):
        m |= _block_map(f"transformer.blocks.{i}.", f"layers.{i}.")
    return m


def _step_layer(module, cache, x, key_padding=None, positions=None):
    out, present = module(torch.as_tensor(x), key_padding=key_padding, layer_past=cache, use_cache=True)
    return out, present


def _step_lm(model, cache, ids, key_padding=None, positions=None):
    logits, present = model(torch.as_tensor(ids), attention_mask=_keep(key_padding), past_key_values=cache, use_cache=True)
    return logits, present


CONV = Conventions(
    norm_placement="pre", activation="gelu_tanh", embedding_scale="none", positions="rope",
    rope_layout="half_split", ffn_kind="gated", gate_activation="silu", fully_masked_rows="uniform",
)
SPACE = ConfigSpace(split_heads=True, max_len=512)

adapter = TorchModuleAdapter("olmo-decoder", [
    TorchEntry(
        "layer_norm",
        make=lambda config: LayerNorm(_olmo_config(config)),
        forward=lambda ln, x: ln(x),
        conventions=Conventions(norm_placement="pre"),
    ),
    TorchEntry(
        "gated_ffn",
        make=FeedForwardOnly,
        forward=lambda m, x: m(x),
        param_map=_ffn_map("block."),
        conventions=Conventions(gate_activation="silu"),
    ),
    TorchEntry(
        "causal_self_attention",
        make=AttentionOnly,
        forward=lambda m, x, key_padding=None, positions=None: m(x, key_padding=key_padding)[0],
        param_map=_attn_map("block."),
        conventions=CONV,
        step=_step_layer,
        derives_positions=True,
        supports=SPACE,
    ),
    TorchEntry(
        "decoder_block",
        make=BlockOnly,
        forward=lambda m, x, key_padding=None, positions=None: m(x, key_padding=key_padding)[0],
        param_map=_block_map("block."),
        conventions=CONV,
        step=_step_layer,
        derives_positions=True,
        supports=SPACE,
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: OLMo(_olmo_config(config)),
        forward=lambda m, ids, key_padding=None, positions=None: m(torch.as_tensor(ids), attention_mask=_keep(key_padding))[0],
        param_map=_lm_map,
        conventions=CONV,
        step=_step_lm,
        derives_positions=True,
        supports=ConfigSpace(split_heads=True, max_len=512, tied=True),
    ),
])
