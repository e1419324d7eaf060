# fmt: off
# ruff: noqa
"""A Llama written the way litgpt writes it (Lightning-AI/litgpt, litgpt/model.py).

One fused `attn` linear whose output is laid out per query group (for each group: its q heads,
its k head, its v head), grouped-query attention, `build_rope_cache` / `apply_rope`
(half-split), `RMSNorm`, `LLaMAMLP` (`fc_1`, `fc_2`, `proj`), a `KVCache` with preallocated
buffers written by `index_copy_`, the causal mask read from a precomputed `mask_cache`, SDPA.
"""
import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LitConfig:
    vocab_size: int = 40
    n_layer: int = 2
    n_head: int = 4
    n_query_groups: int = 2
    n_embd: int = 32
    intermediate_size: int = 64
    block_size: int = 64
    norm_eps: float = 1e-5
    rope_base: int = 10000

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


def build_rope_cache(seq_len: int, n_elem: int, device=None, base: int = 10000) -> Tuple[torch.Tensor, torch.Tensor]:
    theta = 1.0 / (base ** (torch.arange(0, n_elem, 2, device=device, dtype=torch.float64) / n_elem))
    seq_idx = torch.arange(seq_len, device=device, dtype=torch.float64)
    idx_theta = torch.outer(seq_idx, theta).repeat(1, 2)
    return torch.cos(idx_theta), torch.sin(idx_theta)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    head_size = x.size(-1)
    x1 = x[..., : head_size // 2]
    x2 = x[..., head_size // 2 :]
    rotated = torch.cat((-x2, x1), dim=-1)
    roped = (x * cos) + (rotated * sin)
    return roped.to(dtype=x.dtype)


def rope_at(positions: torch.Tensor, head_size: int, base: int, dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """cos and sin rows at the position ids [B, T] (or [T]), ready to broadcast over heads."""
    cos, sin = build_rope_cache(int(positions.max()) + 1, head_size, device=positions.device, base=base)
    cos, sin = cos[positions].to(dtype), sin[positions].to(dtype)
    if positions.dim() == 2:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return cos, sin


class RMSNorm(nn.Module):
    def __init__(self, size: int, dim: int = -1, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.promote_types(dtype, torch.float32))
        norm_x = torch.mean(x * x, dim=self.dim, keepdim=True)
        x_normed = x * torch.rsqrt(norm_x + self.eps)
        x_normed = x_normed.to(dtype=dtype)
        return x_normed * self.weight


class FusedQKV(nn.Module):
    """litgpt's `attn` linear, its weight kept as [n_query_groups, q_per_kv + 2, head_size, n_embd]
    (the same numbers as the [rows, n_embd] matrix, in the per-group order of its rows)."""

    def __init__(self, config: LitConfig) -> None:
        super().__init__()
        q_per_kv = config.n_head // config.n_query_groups
        self.weight = nn.Parameter(torch.empty(config.n_query_groups, q_per_kv + 2, config.head_size, config.n_embd))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.reshape(-1, self.weight.size(-1)))


class KVCache(nn.Module):
    def __init__(self, k_shape: Tuple[int, int, int, int], v_shape: Tuple[int, int, int, int], device=None, dtype=None) -> None:
        super().__init__()
        self.register_buffer("k", torch.zeros(k_shape, device=device, dtype=dtype), persistent=False)
        self.register_buffer("v", torch.zeros(v_shape, device=device, dtype=dtype), persistent=False)

    def forward(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        self.k = self.k.to(k.dtype)
        self.v = self.v.to(v.dtype)
        k = self.k.index_copy_(2, input_pos, k)
        v = self.v.index_copy_(2, input_pos, v)
        return k, v


def build_mask_cache(max_seq_length: int, device=None) -> torch.Tensor:
    ones = torch.ones((max_seq_length, max_seq_length), device=device, dtype=torch.bool)
    return torch.tril(ones).unsqueeze(0).unsqueeze(0)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: LitConfig) -> None:
        super().__init__()
        self.attn = FusedQKV(config)
        self.proj = nn.Linear(config.head_size * config.n_head, config.n_embd, bias=False)
        self.config = config

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, input_pos: torch.Tensor, kv_cache: Optional[KVCache] = None) -> torch.Tensor:
        B, T, C = x.size()
        qkv = self.attn(x)
        q_per_kv = self.config.n_head // self.config.n_query_groups
        total_qkv = q_per_kv + 2
        qkv = qkv.view(B, T, self.config.n_query_groups, total_qkv, self.config.head_size)
        qkv = qkv.permute(0, 2, 3, 1, 4)  # (B, n_query_groups, total_qkv, T, hs)
        q, k, v = qkv.split((q_per_kv, 1, 1), dim=2)
        q = q.reshape(B, -1, T, self.config.head_size)  # (B, n_head, T, hs)
        k = k.reshape(B, -1, T, self.config.head_size)  # (B, n_query_groups, T, hs)
        v = v.reshape(B, -1, T, self.config.head_size)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        if kv_cache is not None:
            k, v = kv_cache(input_pos, k, v)
        k = k.repeat_interleave(q_per_kv, dim=1)
        v = v.repeat_interleave(q_per_kv, dim=1)
        y = self.scaled_dot_product_attention(q, k, v, mask)
        y = y.reshape(B, T, self.config.head_size * self.config.n_head)
        return self.proj(y)

    def scaled_dot_product_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scale = 1.0 / math.sqrt(self.config.head_size)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, scale=scale, is_causal=False)
        y = y.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # a query with no key: zero
        return y.transpose(1, 2)


class LLaMAMLP(nn.Module):
    def __init__(self, config: LitConfig) -> None:
        super().__init__()
        self.fc_1 = nn.Linear(config.n_embd, config.intermediate_size, bias=False)
        self.fc_2 = nn.Linear(config.n_embd, config.intermediate_size, bias=False)
        self.proj = nn.Linear(config.intermediate_size, config.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_fc_1 = self.fc_1(x)
        x_fc_2 = self.fc_2(x)
        x = F.silu(x_fc_1) * x_fc_2
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, config: LitConfig) -> None:
        super().__init__()
        self.norm_1 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.attn = CausalSelfAttention(config)
        self.norm_2 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.mlp = LLaMAMLP(config)

    def forward(self, x, cos, sin, mask, input_pos, kv_cache=None):
        x_normed = self.norm_1(x)
        attention_output = self.attn(x_normed, cos, sin, mask, input_pos, kv_cache)
        x = attention_output + x
        x = self.mlp(self.norm_2(x)) + x
        return x


class GPT(nn.Module):
    def __init__(self, config: LitConfig) -> None:
        super().__init__()
        self.config = config
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
                ln_f=RMSNorm(config.n_embd, eps=config.norm_eps),
            )
        )
        self.register_buffer("mask_cache", build_mask_cache(config.block_size), persistent=False)

    def forward(self, idx, input_pos, positions, key_padding=None, kv_caches=None):
        x = self.transformer.wte(idx)
        cos, sin, mask = prepare(self, x, input_pos, positions, key_padding, kv_caches)
        for i, block in enumerate(self.transformer.h):
            x = block(x, cos, sin, mask, input_pos, None if kv_caches is None else kv_caches[i])
        x = self.transformer.ln_f(x)
        return self.lm_head(x)


def prepare(owner, x, input_pos, positions, key_padding, kv_caches):
    """cos/sin at the position ids; the mask rows of `input_pos` from `mask_cache`, over the
    cache's buffer (or the call's own keys without a cache), with the key padding."""
    cfg = owner.config
    cos, sin = rope_at(positions, cfg.head_size, cfg.rope_base, x.dtype)
    mask = owner.mask_cache.index_select(2, input_pos)
    n_keys = cfg.block_size if kv_caches is not None else x.size(1)
    mask = mask[:, :, :, :n_keys]
    if key_padding is not None:
        keep = torch.ones(x.size(0), n_keys, dtype=torch.bool, device=x.device)
        keep[:, : key_padding.size(1)] = key_padding
        mask = mask & keep[:, None, None, :]
    return cos, sin, mask


# ---- the adapter
from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def lit_config(config) -> LitConfig:
    return LitConfig(
        vocab_size=config.vocab_size, n_layer=config.n_layers, n_head=config.n_heads,
        n_query_groups=config.n_kv_heads or config.n_heads, n_embd=config.d_model,
        intermediate_size=config.d_ff, block_size=config.max_len,
    )


class AttentionHarness(nn.Module):
    """One CausalSelfAttention (or Block) with the model's mask_cache, called like the model."""

    def __init__(self, config: LitConfig, inner: nn.Module) -> None:
        super().__init__()
        self.config = config
        self.inner = inner
        self.register_buffer("mask_cache", build_mask_cache(config.block_size), persistent=False)

    def forward(self, x, input_pos, positions, key_padding=None, kv_caches=None):
        cos, sin, mask = prepare(self, x, input_pos, positions, key_padding, kv_caches)
        return self.inner(x, cos, sin, mask, input_pos, None if kv_caches is None else kv_caches[0])


def n_layers_of(module) -> int:
    return len(module.transformer.h) if isinstance(module, GPT) else 1


def new_caches(module, batch: int, dtype) -> List[KVCache]:
    cfg = module.config
    shape = (batch, cfg.n_query_groups, cfg.block_size, cfg.head_size)
    return [KVCache(shape, shape, dtype=dtype) for _ in range(n_layers_of(module))]


def call(module, main, key_padding=None, positions=None):
    T = main.size(1)
    input_pos = torch.arange(T, device=main.device)
    if positions is None:
        positions = input_pos
    return module(main, input_pos, positions, key_padding)


def step(module, cache, x=None, key_padding=None, positions=None, ids=None):
    main = x if ids is None else ids
    if cache is None:
        dtype = module.transformer.wte.weight.dtype if isinstance(module, GPT) else main.dtype
        cache = {"pos": 0, "kv": new_caches(module, main.size(0), dtype)}
    start, T = cache["pos"], main.size(1)
    input_pos = torch.arange(start, start + T, device=main.device)
    if positions is None:
        positions = input_pos  # numbered after the cached tokens
    out = module(main, input_pos, positions, key_padding, cache["kv"])
    return out, {"pos": start + T, "kv": cache["kv"]}


def qkv_params(fused: str, o: str, config) -> dict:
    q_per_kv = config.n_heads // (config.n_kv_heads or config.n_heads)
    return {
        "q.weight": Param(fused, slice=(1, 0, q_per_kv)),
        "k.weight": Param(fused, slice=(1, q_per_kv, q_per_kv + 1)),
        "v.weight": Param(fused, slice=(1, q_per_kv + 1, q_per_kv + 2)),
        "o.weight": o,
    }


def block_params(prefix: str, config) -> dict:
    names = {f"self_attn.{k}": v for k, v in qkv_params(f"{prefix}attn.attn.weight", f"{prefix}attn.proj.weight", config).items()}
    names |= {"norm1.weight": f"{prefix}norm_1.weight", "norm2.weight": f"{prefix}norm_2.weight"}
    names |= {"ffn.gate.weight": f"{prefix}mlp.fc_1.weight", "ffn.up.weight": f"{prefix}mlp.fc_2.weight"}
    names |= {"ffn.down.weight": f"{prefix}mlp.proj.weight"}
    return names


def lm_params(config) -> dict:
    names = {"embedding.weight": "transformer.wte.weight", "norm.weight": "transformer.ln_f.weight", "lm_head.weight": "lm_head.weight"}
    for i in range(config.n_layers):
        names |= {f"layers.{i}.{k}": v for k, v in block_params(f"transformer.h.{i}.", config).items()}
    return names


LLAMA = Conventions(
    norm_placement="pre", norm_kind="rms_norm", eps=1e-5, embedding_scale="none", positions="rope",
    rope_layout="half_split", ffn_kind="gated", gate_activation="silu",
)
SPACE = dict(fixed={"n_heads": 4, "n_kv_heads": 2}, split_heads=True, max_len=64, biases={"attention": False, "ffn": False})

adapter = TorchModuleAdapter("litgpt-llama", [
    TorchEntry(
        "rms_norm",
        make=lambda config: RMSNorm(config.d_model, eps=1e-5),
        forward=lambda m, x: m(x),
        conventions=Conventions(norm_kind="rms_norm", eps=1e-5),
    ),
    TorchEntry(
        "rope",
        make=lambda config: nn.Identity(),
        forward=lambda m, x, positions: apply_rope(x, *rope_at(positions, x.size(-1), 10000, x.dtype)),
        conventions=Conventions(rope_layout="half_split"),
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: AttentionHarness(lit_config(config), CausalSelfAttention(lit_config(config))),
        forward=lambda m, x, key_padding=None, positions=None: call(m, x, key_padding, positions),
        param_map=lambda config: {k: (Param("inner." + v.name, slice=v.slice) if isinstance(v, Param) else "inner." + v) for k, v in qkv_params("attn.weight", "proj.weight", config).items()},
        conventions=LLAMA, step=step, derives_positions=True, supports=ConfigSpace(**SPACE),
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: AttentionHarness(lit_config(config), Block(lit_config(config))),
        forward=lambda m, x, key_padding=None, positions=None: call(m, x, key_padding, positions),
        param_map=lambda config: {k: (Param("inner." + v.name, slice=v.slice) if isinstance(v, Param) else "inner." + v) for k, v in block_params("", config).items()},
        conventions=LLAMA, step=step, derives_positions=True, supports=ConfigSpace(**SPACE),
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: GPT(lit_config(config)),
        forward=lambda m, ids, key_padding=None, positions=None: call(m, ids, key_padding, positions),
        param_map=lm_params,
        conventions=LLAMA, step=step, derives_positions=True, supports=ConfigSpace(**SPACE, tied=False),
    ),
])
