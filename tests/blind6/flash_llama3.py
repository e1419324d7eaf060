# fmt: off
# ruff: noqa
"""A Llama-3-style decoder whose attention is a FlashAttention-2-style tiled online softmax
written in PyTorch (a loop over key blocks keeping a running max and a running sum, the
accumulator rescaled at each block), grouped-query attention by indexing the key/value head
of each query head (the kernels' ``off_h // group``), a dynamic KV cache passed around as HF
``past_key_values`` tuples and grown with ``torch.cat``, RMSNorm (eps 1e-5), SwiGLU, and RoPE
in HF's rotate_half layout with Llama 3.1's frequency scaling (base 500000, factor 8).

Written for the sixth blind benchmark (tests/blind6); correct as written.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelArgs:
    dim: int = 32
    n_heads: int = 4
    n_kv_heads: int = 2
    hidden_dim: int = 64
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    rope_factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    block_n: int = 4  # keys per tile of the online softmax


def llama3_inv_freq(head_dim, args):
    """Llama 3.1's apply_scaling: long wavelengths divided by the factor, short ones kept."""
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    low_freq_wavelen = args.original_max_position_embeddings / args.low_freq_factor
    high_freq_wavelen = args.original_max_position_embeddings / args.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    smooth = (args.original_max_position_embeddings / wavelen - args.low_freq_factor) / (args.high_freq_factor - args.low_freq_factor)
    smoothed = (1 - smooth) * inv_freq / args.rope_factor + smooth * inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / args.rope_factor, inv_freq)
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, head_dim, args):
        super().__init__()
        # a plain attribute, not a buffer: module.to(float16) must not round the frequencies
        self.inv_freq = llama3_inv_freq(head_dim, args)

    @torch.no_grad()
    def forward(self, x, position_ids):
        freqs = position_ids[..., None].to(torch.float64) * self.inv_freq.to(x.device)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed.to(q.dtype), k_embed.to(k.dtype)


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.promote_types(input_dtype, torch.float32))
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def make_attn_bias(attention_mask, q_len, kv_len, dtype, device):
    """Additive bias [B or 1, 1, q_len, kv_len]: 0 where a query may attend, -inf elsewhere.
    The new queries are the last q_len of kv_len tokens (bottom-right causal alignment)."""
    past_len = kv_len - q_len
    rows = torch.arange(q_len, device=device)[:, None] + past_len
    cols = torch.arange(kv_len, device=device)[None, :]
    allowed = (cols <= rows)[None, None]
    if attention_mask is not None:  # [B, kv_len], True = a real token
        allowed = allowed & attention_mask[:, None, None, :].bool()
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, float("-inf"))


def flash_attn_fwd(q, k, v, attn_bias, softmax_scale, block_n):
    """FlashAttention-2's forward, tiled over the keys: m_i the running max, l_i the running sum,
    acc the unnormalised output; each tile rescales what came before by exp(m_old - m_new)."""
    acc_dtype = torch.promote_types(q.dtype, torch.float32)
    batch, n_heads, q_len, head_dim = q.shape
    kv_len = k.shape[-2]
    q = q.to(acc_dtype) * softmax_scale
    m_i = torch.full((batch, n_heads, q_len, 1), float("-inf"), dtype=acc_dtype, device=q.device)
    l_i = torch.zeros((batch, n_heads, q_len, 1), dtype=acc_dtype, device=q.device)
    acc = torch.zeros((batch, n_heads, q_len, v.shape[-1]), dtype=acc_dtype, device=q.device)
    for start_n in range(0, kv_len, block_n):
        end_n = min(start_n + block_n, kv_len)
        k_j = k[:, :, start_n:end_n].to(acc_dtype)
        v_j = v[:, :, start_n:end_n].to(acc_dtype)
        qk = q @ k_j.transpose(-1, -2) + attn_bias[..., start_n:end_n]
        m_ij = torch.maximum(m_i, qk.amax(dim=-1, keepdim=True))
        m_safe = torch.where(torch.isinf(m_ij), torch.zeros_like(m_ij), m_ij)  # a fully masked row so far
        p = torch.exp(qk - m_safe)
        alpha = torch.exp(m_i - m_safe)
        l_i = l_i * alpha + p.sum(dim=-1, keepdim=True)
        acc = acc * alpha + p @ v_j
        m_i = m_ij
    out = acc / torch.where(l_i == 0, torch.ones_like(l_i), l_i)  # no key at all: 0
    return out.to(v.dtype)


class LlamaAttention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.num_heads = args.n_heads
        self.num_key_value_heads = args.n_kv_heads
        self.num_key_value_groups = args.n_heads // args.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.scaling = self.head_dim ** -0.5
        self.block_n = args.block_n
        self.q_proj = nn.Linear(args.dim, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(args.dim, self.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(args.dim, self.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, args.dim, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(self.head_dim, args)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None, use_cache=False):
        bsz, q_len, _ = hidden_states.shape
        query_states = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)

        past_len = past_key_value[0].shape[-2] if past_key_value is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past_len, past_len + q_len, device=hidden_states.device)[None].expand(bsz, -1)
        cos, sin = self.rotary_emb(value_states, position_ids)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        if past_key_value is not None:
            key_states = torch.cat([past_key_value[0], key_states], dim=-2)
            value_states = torch.cat([past_key_value[1], value_states], dim=-2)
        present = (key_states, value_states) if use_cache else None

        kv_len = key_states.shape[-2]
        acc_dtype = torch.promote_types(query_states.dtype, torch.float32)
        attn_bias = make_attn_bias(attention_mask, q_len, kv_len, acc_dtype, hidden_states.device)
        kv_head = torch.arange(self.num_heads, device=hidden_states.device) // self.num_key_value_groups
        attn_output = flash_attn_fwd(query_states, key_states[:, kv_head], value_states[:, kv_head], attn_bias, self.scaling, self.block_n)
        attn_output = attn_output.transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(attn_output), present


class LlamaMLP(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.gate_proj = nn.Linear(args.dim, args.hidden_dim, bias=False)
        self.up_proj = nn.Linear(args.dim, args.hidden_dim, bias=False)
        self.down_proj = nn.Linear(args.hidden_dim, args.dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.self_attn = LlamaAttention(args)
        self.mlp = LlamaMLP(args)
        self.input_layernorm = LlamaRMSNorm(args.dim, eps=args.norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None, use_cache=False):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, present = self.self_attn(hidden_states, attention_mask, position_ids, past_key_value, use_cache)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states, present


class RotaryOnly(nn.Module):
    """The rotation alone, for the rope subject: x [B, H, L, d]."""

    def __init__(self, head_dim, args):
        super().__init__()
        self.rotary_emb = LlamaRotaryEmbedding(head_dim, args)

    def forward(self, x, positions):
        position_ids = positions if positions.dim() == 2 else positions[None]
        cos, sin = self.rotary_emb(x, position_ids)
        rotated, _ = apply_rotary_pos_emb(x, x, cos, sin)
        return rotated


# ---- the adapter
from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.adapters.reference import LLAMA
from tck.reference import Conventions
import dataclasses


def _args(config):
    return ModelArgs(dim=config.d_model, n_heads=config.n_heads, n_kv_heads=config.n_kv_heads or config.n_heads, hidden_dim=config.d_ff)


CONVENTIONS = dataclasses.replace(LLAMA, eps=1e-5, pe_base=500000.0, rope_scaling="llama3", rope_scaling_factor=8.0, rope_low_freq_factor=1.0, rope_high_freq_factor=4.0, rope_original_max_positions=8192)
FIXED = {"n_kv_heads": 2, "bias": False, "norm_bias": False, "tie_weights": False}
ATTN = {"q.weight": "q_proj.weight", "k.weight": "k_proj.weight", "v.weight": "v_proj.weight", "o.weight": "o_proj.weight"}
MLP = {"gate.weight": "gate_proj.weight", "up.weight": "up_proj.weight", "down.weight": "down_proj.weight"}
BLOCK = {f"self_attn.{k}": f"self_attn.{v}" for k, v in ATTN.items()}
BLOCK |= {f"ffn.{k}": f"mlp.{v}" for k, v in MLP.items()}
BLOCK |= {"norm1.weight": "input_layernorm.weight", "norm2.weight": "post_attention_layernorm.weight"}


def _forward(module, x, key_padding=None, positions=None):
    out, _ = module(x, attention_mask=key_padding, position_ids=positions)
    return out


def _step(module, cache, x, key_padding=None, positions=None):
    out, present = module(x, attention_mask=key_padding, position_ids=positions, past_key_value=cache, use_cache=True)
    return out, present


adapter = TorchModuleAdapter("flash-llama3", [
    TorchEntry("rms_norm", make=lambda config: LlamaRMSNorm(config.d_model, eps=1e-5), forward=lambda m, x: m(x), conventions=CONVENTIONS, config=FIXED),
    TorchEntry("rope", make=lambda config: RotaryOnly(config.d_model // config.n_heads, _args(config)), forward=lambda m, x, positions: m(x, positions), conventions=CONVENTIONS, config=FIXED),
    TorchEntry("gated_ffn", make=lambda config: LlamaMLP(_args(config)), forward=lambda m, x: m(x), param_map=MLP, conventions=CONVENTIONS, config=FIXED),
    TorchEntry("causal_self_attention", make=lambda config: LlamaAttention(_args(config)), forward=_forward, step=_step, derives_positions=True, param_map=ATTN, conventions=CONVENTIONS, config=FIXED),
    TorchEntry("decoder_block", make=lambda config: LlamaDecoderLayer(_args(config)), forward=_forward, step=_step, derives_positions=True, param_map=BLOCK, conventions=CONVENTIONS, config=FIXED),
])
