# fmt: off
# ruff: noqa
"""A Llama decoder as pytorch-labs/gpt-fast writes it (model.py): one fused `wqkv`
projection split by sizes, a precomputed `freqs_cis` table of (cos, sin) pairs indexed by the
positions, RoPE on interleaved pairs computed in real arithmetic as gpt-fast's
`apply_rotary_emb` does, a preallocated static `KVCache` written with `index_copy_` at
`input_pos`, a causal mask buffer sliced `causal_mask[None, None, input_pos]`, grouped-query
attention by `repeat_interleave`, `F.scaled_dot_product_attention` with a boolean mask,
RMSNorm, SwiGLU, an untied output head.

Kept inside SPEC: the full forward (no cache) attends its own keys; the cache slots are the
token indices, the RoPE angles the position ids (gpt-fast uses `input_pos` for both); the
float32 upcasts are applied to 16-bit inputs only, so a float64 build has no float32 island.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from tck.adapters import Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


@dataclass
class ModelArgs:
    block_size: int = 512
    vocab_size: int = 40
    n_layer: int = 2
    n_head: int = 4
    dim: int = 32
    intermediate_size: int = 64
    n_local_heads: int = 2
    head_dim: int = 8
    rope_base: float = 10000
    norm_eps: float = 1e-5


def upcast(x):
    # gpt-fast computes these steps in float32 (x.float()); a float64 build stays float64
    return x.float() if x.element_size() < 4 else x


def precompute_freqs_cis(seq_len, n_elem, base=10000):
    freqs = 1.0 / (base ** (torch.arange(0, n_elem, 2, dtype=torch.float64)[: (n_elem // 2)] / n_elem))
    t = torch.arange(seq_len, dtype=torch.float64)
    freqs = torch.outer(t, freqs)
    cache = torch.stack([torch.cos(freqs), torch.sin(freqs)], dim=-1)
    return cache


def apply_rotary_emb(x, freqs_cis):
    # x [B, L, H, d], freqs_cis [B, L, d/2, 2]
    xshaped = upcast(x).reshape(*x.shape[:-1], -1, 2)
    freqs_cis = upcast(freqs_cis).view(xshaped.size(0), xshaped.size(1), 1, xshaped.size(3), 2)
    x_out2 = torch.stack(
        [
            xshaped[..., 0] * freqs_cis[..., 0] - xshaped[..., 1] * freqs_cis[..., 1],
            xshaped[..., 1] * freqs_cis[..., 0] + xshaped[..., 0] * freqs_cis[..., 1],
        ],
        -1,
    )
    x_out2 = x_out2.flatten(3)
    return x_out2.type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(upcast(x)).type_as(x)
        return output * self.weight


class KVCache(nn.Module):
    def __init__(self, max_batch_size, max_seq_length, n_heads, head_dim, dtype):
        super().__init__()
        cache_shape = (max_batch_size, n_heads, max_seq_length, head_dim)
        self.register_buffer("k_cache", torch.zeros(cache_shape, dtype=dtype))
        self.register_buffer("v_cache", torch.zeros(cache_shape, dtype=dtype))

    def update(self, input_pos, k_val, v_val):
        # input_pos: [S], k_val: [B, H, S, D]
        assert input_pos.shape[0] == k_val.shape[2]
        k_out = self.k_cache
        v_out = self.v_cache
        k_out.index_copy_(2, input_pos, k_val)
        v_out.index_copy_(2, input_pos, v_val)
        return k_out, v_out


class FeedForward(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.intermediate_size, bias=False)
        self.w3 = nn.Linear(config.dim, config.intermediate_size, bias=False)
        self.w2 = nn.Linear(config.intermediate_size, config.dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.dim % config.n_head == 0
        total_head_dim = (config.n_head + 2 * config.n_local_heads) * config.head_dim
        self.wqkv = nn.Linear(config.dim, total_head_dim, bias=False)
        self.wo = nn.Linear(config.n_head * config.head_dim, config.dim, bias=False)
        self.n_head = config.n_head
        self.head_dim = config.head_dim
        self.n_local_heads = config.n_local_heads
        self.dim = config.dim

    def forward(self, x, freqs_cis, mask, input_pos=None, kv_cache=None):
        bsz, seqlen, _ = x.shape

        kv_size = self.n_local_heads * self.head_dim
        q, k, v = self.wqkv(x).split([self.dim, kv_size, kv_size], dim=-1)

        q = q.view(bsz, seqlen, self.n_head, self.head_dim)
        k = k.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        v = v.view(bsz, seqlen, self.n_local_heads, self.head_dim)

        q = apply_rotary_emb(q, freqs_cis)
        k = apply_rotary_emb(k, freqs_cis)

        q, k, v = map(lambda x: x.transpose(1, 2), (q, k, v))

        if kv_cache is not None:
            k, v = kv_cache.update(input_pos, k, v)

        k = k.repeat_interleave(self.n_head // self.n_local_heads, dim=1)
        v = v.repeat_interleave(self.n_head // self.n_local_heads, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)

        y = y.transpose(1, 2).contiguous().view(bsz, seqlen, self.n_head * self.head_dim)

        y = self.wo(y)
        return y


class TransformerBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = Attention(config)
        self.feed_forward = FeedForward(config)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)

    def forward(self, x, input_pos, freqs_cis, mask, kv_cache=None):
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask, input_pos, kv_cache)
        out = h + self.feed_forward(self.ffn_norm(h))
        return out


class Rotary(nn.Module):
    """The freqs_cis table and its lookup, shared by the attention subjects and the model."""

    def __init__(self, config):
        super().__init__()
        self.register_buffer("freqs_cis", precompute_freqs_cis(config.block_size, config.head_dim, config.rope_base), persistent=False)
        self.register_buffer("causal_mask", torch.tril(torch.ones(config.block_size, config.block_size, dtype=torch.bool)), persistent=False)

    def prepare(self, bsz, seqlen, positions=None, key_padding=None, kv_cache=None, start=0):
        """freqs_cis rows at the position ids; the boolean mask over the keys attended."""
        input_pos = torch.arange(start, start + seqlen, device=self.causal_mask.device)
        if positions is None:
            positions = input_pos[None].expand(bsz, seqlen)
        freqs_cis = self.freqs_cis[positions]
        mask = self.causal_mask[None, None, input_pos]
        if kv_cache is None:
            mask = mask[..., :seqlen]
        if key_padding is not None:
            key_padding = F.pad(key_padding, (0, mask.shape[-1] - key_padding.shape[-1]), value=False)
            mask = mask & key_padding[:, None, None, :]
        return input_pos, freqs_cis, mask


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.rotary = Rotary(config)
        self.attention = Attention(config)

    def forward(self, x, key_padding=None, positions=None, kv_cache=None, start=0):
        bsz, seqlen, _ = x.shape
        input_pos, freqs_cis, mask = self.rotary.prepare(bsz, seqlen, positions, key_padding, kv_cache, start)
        return self.attention(x, freqs_cis, mask, input_pos, kv_cache)


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.rotary = Rotary(config)
        self.block = TransformerBlock(config)

    def forward(self, x, key_padding=None, positions=None, kv_cache=None, start=0):
        bsz, seqlen, _ = x.shape
        input_pos, freqs_cis, mask = self.rotary.prepare(bsz, seqlen, positions, key_padding, kv_cache, start)
        return self.block(x, input_pos, freqs_cis, mask, kv_cache)


class Transformer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(TransformerBlock(config) for _ in range(config.n_layer))
        self.norm = RMSNorm(config.dim, eps=config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)
        self.rotary = Rotary(config)

    def forward(self, idx, key_padding=None, positions=None, kv_caches=None, start=0):
        bsz, seqlen = idx.shape
        cache = kv_caches[0] if kv_caches is not None else None
        input_pos, freqs_cis, mask = self.rotary.prepare(bsz, seqlen, positions, key_padding, cache, start)
        x = self.tok_embeddings(idx)

        for i, layer in enumerate(self.layers):
            x = layer(x, input_pos, freqs_cis, mask, kv_caches[i] if kv_caches is not None else None)
        x = self.norm(x)
        logits = self.output(x)
        return logits


# ---- the adapter -------------------------------------------------------------------------

def args_of(config):
    return ModelArgs(
        block_size=config.max_len, vocab_size=config.vocab_size, n_layer=config.n_layers,
        n_head=config.n_heads, dim=config.d_model, intermediate_size=config.d_ff,
        n_local_heads=config.n_kv_heads or config.n_heads, head_dim=config.d_model // config.n_heads,
    )


class RopeOnly(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.args = args_of(config)

    def forward(self, x, positions):
        # x [B, H, L, d] (the kit's layout) -> gpt-fast's [B, L, H, d]
        positions = positions if positions.dim() == 2 else positions[None].expand(x.shape[0], -1)
        # the table alone, as long as the positions asked for (no mask buffer here)
        freqs_cis = precompute_freqs_cis(int(positions.max()) + 1, x.shape[-1], self.args.rope_base)
        out = apply_rotary_emb(x.transpose(1, 2), freqs_cis.to(x.dtype)[positions])
        return out.transpose(1, 2)


class State:
    """The decoding state the adapter carries between steps: one KVCache per layer and the
    number of tokens so far."""

    def __init__(self, caches):
        self.caches = caches
        self.length = 0


def new_caches(module, x, n):
    config = module.config
    dtype = next(module.parameters()).dtype
    return [KVCache(x.shape[0], config.block_size, config.n_local_heads, config.head_dim, dtype) for _ in range(n)]


def t(a):
    return None if a is None else torch.as_tensor(a)


def step_attn(module, cache, x, key_padding=None, positions=None):
    if cache is None:
        cache = State(new_caches(module, x, 1))
    out = module(x, key_padding=key_padding, positions=positions, kv_cache=cache.caches[0], start=cache.length)
    cache.length += x.shape[1]
    return out, cache


def step_lm(module, cache, ids, key_padding=None, positions=None):
    if cache is None:
        cache = State(new_caches(module, ids, module.config.n_layer))
    out = module(ids, key_padding=key_padding, positions=positions, kv_caches=cache.caches, start=cache.length)
    cache.length += ids.shape[1]
    return out, cache


def attn_map(config, own="attention.", canon=""):
    D, dh = config.d_model, config.d_model // config.n_heads
    kv = (config.n_kv_heads or config.n_heads) * dh
    return {
        f"{canon}q.weight": Param(f"{own}wqkv.weight", slice=(0, 0, D)),
        f"{canon}k.weight": Param(f"{own}wqkv.weight", slice=(0, D, D + kv)),
        f"{canon}v.weight": Param(f"{own}wqkv.weight", slice=(0, D + kv, D + 2 * kv)),
        f"{canon}o.weight": f"{own}wo.weight",
    }


def block_map(config, own="", canon=""):
    out = attn_map(config, f"{own}attention.", f"{canon}self_attn.")
    out |= {
        f"{canon}norm1.weight": f"{own}attention_norm.weight",
        f"{canon}norm2.weight": f"{own}ffn_norm.weight",
        f"{canon}ffn.gate.weight": f"{own}feed_forward.w1.weight",
        f"{canon}ffn.up.weight": f"{own}feed_forward.w3.weight",
        f"{canon}ffn.down.weight": f"{own}feed_forward.w2.weight",
    }
    return out


def lm_map(config):
    out = {"embedding.weight": "tok_embeddings.weight", "norm.weight": "norm.weight", "lm_head.weight": "output.weight"}
    for i in range(config.n_layers):
        out |= block_map(config, f"layers.{i}.", f"layers.{i}.")
    return out


LLAMA = dict(
    norm_placement="pre", norm_kind="rms_norm", eps=1e-5, positions="rope",
    rope_layout="interleaved", ffn_kind="gated", gate_activation="silu", embedding_scale="none",
)
FIXED = {"n_kv_heads": 2, "bias": False}

adapter = TorchModuleAdapter("gpt-fast-llama", [
    TorchEntry(
        "rms_norm",
        make=lambda config: RMSNorm(config.d_model, 1e-5),
        forward=lambda m, x: m(x),
        conventions=Conventions(norm_kind="rms_norm", eps=1e-5),
    ),
    TorchEntry(
        "rope",
        make=lambda config: RopeOnly(config),
        forward=lambda m, x, positions: m(x, positions),
        conventions=Conventions(rope_layout="interleaved"),
    ),
    TorchEntry(
        "gated_ffn",
        make=lambda config: FeedForward(args_of(config)),
        forward=lambda m, x: m(x),
        param_map={"gate.weight": "w1.weight", "up.weight": "w3.weight", "down.weight": "w2.weight"},
        conventions=Conventions(ffn_kind="gated", gate_activation="silu"),
        config={"bias": False},
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: CausalSelfAttention(args_of(config)),
        forward=lambda m, x, key_padding=None, positions=None: m(x, key_padding=t(key_padding), positions=t(positions)),
        step=lambda m, cache, x, key_padding=None, positions=None: step_attn(m, cache, x, t(key_padding), t(positions)),
        derives_positions=True,
        param_map=attn_map,
        conventions=Conventions(**LLAMA),
        config=FIXED,
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: Block(args_of(config)),
        forward=lambda m, x, key_padding=None, positions=None: m(x, key_padding=t(key_padding), positions=t(positions)),
        step=lambda m, cache, x, key_padding=None, positions=None: step_attn(m, cache, x, t(key_padding), t(positions)),
        derives_positions=True,
        param_map=lambda config: block_map(config, "block."),
        conventions=Conventions(**LLAMA),
        config=FIXED,
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: Transformer(args_of(config)),
        forward=lambda m, ids, key_padding=None, positions=None: m(ids, key_padding=t(key_padding), positions=t(positions)),
        step=lambda m, cache, ids, key_padding=None, positions=None: step_lm(m, cache, ids, t(key_padding), t(positions)),
        derives_positions=True,
        param_map=lm_map,
        conventions=Conventions(**LLAMA),
        config={**FIXED, "tie_weights": False},
    ),
])
