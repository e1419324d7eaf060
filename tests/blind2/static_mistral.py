# fmt: off
# ruff: noqa: E501
"""A Mistral/Qwen2-style decoder written the way gpt-fast writes Llama: a static,
preallocated KV cache filled with ``index_copy_``, RoPE as a complex multiplication
(``torch.polar`` / ``view_as_complex``, pairs (2i, 2i+1)), one fused qkv projection with
q/k/v biases and no bias on the output projection (Qwen2), grouped-query attention through
``repeat_interleave``, a sliding-window causal mask handed to
``F.scaled_dot_product_attention`` as a boolean mask, RMSNorm, SwiGLU, untied head.

Correct as written; tests/blind2/bugs.json lists one-line bugs of it (the blind benchmark).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Config, Conventions

ROPE_THETA = 1_000_000.0  # Mistral 7B v0.2 / Qwen2 rope_theta
NORM_EPS = 1e-5
SLIDING_WINDOW = 6  # tiny, so that the suite's sequences (up to 29 tokens) exceed it


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for 16-bit inputs (statistics and angles are formed there), else the input's."""
    return torch.promote_types(dtype, torch.float32)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = NORM_EPS):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(compute_dtype(x.dtype))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.type_as(x)


def precompute_freqs_cis(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype) -> torch.Tensor:
    """e^{i pos w_j}, w_j = theta^(-2j/d): [B, n, d/2] complex, for positions [B, n]."""
    real = compute_dtype(dtype)
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=real) / head_dim))
    angles = positions.to(real)[..., None] * freqs
    return torch.polar(torch.ones_like(angles), angles)


def apply_rotary_emb(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    """x [B, n, H, d] rotated pairwise by freqs_cis [B, n, d/2]."""
    xc = torch.view_as_complex(x.to(compute_dtype(x.dtype)).reshape(*x.shape[:-1], -1, 2))
    rotated = xc * freqs_cis[:, :, None, :]
    return torch.view_as_real(rotated).flatten(3).type_as(x)


class StaticKVCache(nn.Module):
    """One layer's keys and values, preallocated for max_len slots [B, Hkv, max_len, d]."""

    def __init__(self, batch: int, n_kv_heads: int, max_len: int, head_dim: int, dtype: torch.dtype, device: torch.device):
        super().__init__()
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype, device=device))
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype, device=device))
        self.filled = 0

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = k.shape[2]
        slots = torch.arange(self.filled, self.filled + n, device=k.device)
        self.k_cache.index_copy_(2, slots, k)
        self.v_cache.index_copy_(2, slots, v)
        self.filled += n
        return self.k_cache[:, :, : self.filled], self.v_cache[:, :, : self.filled]


def attention_mask(start: int, n: int, key_padding: torch.Tensor | None, window: int | None, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep-mask [B|1, 1, n, start + n] over cache slots (slot order = sequence order): causal,
    within the sliding window, real keys only; and which query rows keep any key at all."""
    q_slots = torch.arange(start, start + n, device=device)
    k_slots = torch.arange(start + n, device=device)
    keep = k_slots[None, :] <= q_slots[:, None]
    if window is not None:
        keep = keep & (k_slots[None, :] > q_slots[:, None] - window)
    keep = keep[None, None]
    if key_padding is not None:
        keep = keep & key_padding[:, None, None, :]
    has_key = keep.any(dim=-1, keepdim=True)
    # a row with no key left (a padded query) attends everywhere and is zeroed afterwards
    return keep | ~has_key, has_key


class Attention(nn.Module):
    def __init__(self, config: Config, window: int | None):
        super().__init__()
        self.n_heads = config.n_heads
        self.n_kv_heads = config.kv_heads
        self.head_dim = config.head_dim_k
        self.window = window
        self.q_size = self.n_heads * self.head_dim
        self.kv_size = self.n_kv_heads * self.head_dim
        self.wqkv = nn.Linear(config.d_model, self.q_size + 2 * self.kv_size, bias=config.has_attention_bias)
        self.wo = nn.Linear(self.q_size, config.d_model, bias=config.has_attention_out_bias)

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor, mask: tuple[torch.Tensor, torch.Tensor], kv_cache: StaticKVCache | None = None) -> torch.Tensor:
        bsz, seqlen, _ = x.shape
        q, k, v = self.wqkv(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(bsz, seqlen, self.n_heads, self.head_dim)
        k = k.view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        v = v.view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        q = apply_rotary_emb(q, freqs_cis)
        k = apply_rotary_emb(k, freqs_cis)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)
        n_rep = self.n_heads // self.n_kv_heads
        k, v = (t.repeat_interleave(n_rep, dim=1) for t in (k, v))  # kv head j serves query heads j*n_rep to (j+1)*n_rep - 1
        keep, has_key = mask
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        y = y * has_key
        y = y.transpose(1, 2).contiguous().view(bsz, seqlen, self.q_size)
        return self.wo(y)


class FeedForward(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        bias = config.has_ffn_bias
        self.w1 = nn.Linear(config.d_model, config.d_ff, bias=bias)
        self.w3 = nn.Linear(config.d_model, config.d_ff, bias=bias)
        self.w2 = nn.Linear(config.d_ff, config.d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, config: Config, window: int | None = SLIDING_WINDOW):
        super().__init__()
        self.attention = Attention(config, window)
        self.feed_forward = FeedForward(config)
        self.attention_norm = RMSNorm(config.d_model)
        self.ffn_norm = RMSNorm(config.d_model)

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor, mask: tuple[torch.Tensor, torch.Tensor], kv_cache: StaticKVCache | None = None) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask, kv_cache)
        out = h + self.feed_forward(self.ffn_norm(h))
        return out


def default_positions(start: int, n: int, batch: int, key_padding: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    """Position ids [B, n] when none are given: numbered from the cache's length, or from the
    first real token of a (left-)padded row, as generate() numbers them."""
    if key_padding is None:
        return torch.arange(start, start + n, device=device).expand(batch, n)
    counted = key_padding.long().cumsum(-1) - 1
    return counted.clamp(min=0)[:, start : start + n]


class DecoderStack(nn.Module):
    """Blocks over hidden states, with the mask, the angles and the static caches."""

    def __init__(self, config: Config, n_layers: int):
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(TransformerBlock(config) for _ in range(n_layers))

    def setup_caches(self, batch: int, like: torch.Tensor) -> nn.ModuleList:
        c = self.config
        return nn.ModuleList(
            StaticKVCache(batch, c.kv_heads, c.max_len, c.head_dim_k, like.dtype, like.device) for _ in self.layers
        )

    def forward(self, h: torch.Tensor, key_padding: torch.Tensor | None = None, positions: torch.Tensor | None = None, caches: nn.ModuleList | None = None) -> torch.Tensor:
        bsz, seqlen, _ = h.shape
        start = caches[0].filled if caches is not None else 0
        if positions is None:
            positions = default_positions(start, seqlen, bsz, key_padding, h.device)
        freqs_cis = precompute_freqs_cis(positions.expand(bsz, seqlen), self.config.head_dim_k, ROPE_THETA, h.dtype)
        mask = attention_mask(start, seqlen, key_padding, SLIDING_WINDOW, h.device)
        for i, layer in enumerate(self.layers):
            h = layer(h, freqs_cis, mask, caches[i] if caches is not None else None)
        return h


class Transformer(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.d_model)
        self.stack = DecoderStack(config, config.n_layers)
        self.norm = RMSNorm(config.d_model)
        self.output = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, key_padding: torch.Tensor | None = None, positions: torch.Tensor | None = None, caches: nn.ModuleList | None = None) -> torch.Tensor:
        h = self.tok_embeddings(idx)
        h = self.stack(h, key_padding, positions, caches)
        return self.output(self.norm(h))


class SingleBlock(nn.Module):
    """decoder_block: one TransformerBlock driven by a DecoderStack of one layer."""

    def __init__(self, config: Config):
        super().__init__()
        self.stack = DecoderStack(config, 1)

    def forward(self, x: torch.Tensor, key_padding: torch.Tensor | None = None, positions: torch.Tensor | None = None, caches: nn.ModuleList | None = None) -> torch.Tensor:
        return self.stack(x, key_padding, positions, caches)


class SingleAttention(nn.Module):
    """causal_self_attention: the attention of one block, with its mask and angles."""

    def __init__(self, config: Config):
        super().__init__()
        self.config = config
        self.attention = Attention(config, SLIDING_WINDOW)

    def forward(self, x: torch.Tensor, key_padding: torch.Tensor | None = None, positions: torch.Tensor | None = None, caches: list[StaticKVCache] | None = None) -> torch.Tensor:
        bsz, seqlen, _ = x.shape
        start = caches[0].filled if caches is not None else 0
        if positions is None:
            positions = default_positions(start, seqlen, bsz, key_padding, x.device)
        freqs_cis = precompute_freqs_cis(positions.expand(bsz, seqlen), self.config.head_dim_k, ROPE_THETA, x.dtype)
        mask = attention_mask(start, seqlen, key_padding, SLIDING_WINDOW, x.device)
        return self.attention(x, freqs_cis, mask, caches[0] if caches is not None else None)


class Rotary(nn.Module):
    """rope: x [B, H, L, d] at positions [L]."""

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        freqs_cis = precompute_freqs_cis(positions[None, :], x.shape[-1], ROPE_THETA, x.dtype)
        return apply_rotary_emb(x.transpose(1, 2), freqs_cis).transpose(1, 2)


# ---------------------------------------------------------------- the adapter

def attention_map(ours: str, theirs: str, c: Config) -> dict:
    q, kv = c.n_heads * c.head_dim_k, c.kv_heads * c.head_dim_k
    cuts = {"q": (0, q), "k": (q, q + kv), "v": (q + kv, q + 2 * kv)}
    mapping: dict = {}
    for name, (lo, hi) in cuts.items():
        mapping[f"{ours}{name}.weight"] = Param(f"{theirs}wqkv.weight", slice=(0, lo, hi))
        mapping[f"{ours}{name}.bias"] = Param(f"{theirs}wqkv.bias", slice=(0, lo, hi))
    mapping[f"{ours}o.weight"] = f"{theirs}wo.weight"
    return mapping


def block_map(ours: str, theirs: str, c: Config) -> dict:
    mapping = attention_map(f"{ours}self_attn.", f"{theirs}attention.", c)
    mapping[f"{ours}norm1.weight"] = f"{theirs}attention_norm.weight"
    mapping[f"{ours}norm2.weight"] = f"{theirs}ffn_norm.weight"
    for canonical, mine in (("gate", "w1"), ("up", "w3"), ("down", "w2")):
        mapping[f"{ours}ffn.{canonical}.weight"] = f"{theirs}feed_forward.{mine}.weight"
    return mapping


def lm_map(c: Config) -> dict:
    mapping = {"embedding.weight": "tok_embeddings.weight", "norm.weight": "norm.weight", "lm_head.weight": "output.weight"}
    for i in range(c.n_layers):
        mapping |= block_map(f"layers.{i}.", f"stack.layers.{i}.", c)
    return mapping


def make_step(first_input: str):
    """step(module, cache, <x|ids>, key_padding=None, positions=None): the static caches are
    allocated on the first call and filled slot by slot."""

    def step(module, cache, key_padding=None, positions=None, **inputs):
        main = inputs[first_input]
        if cache is None:
            stack = module.stack if hasattr(module, "stack") else None
            like = module.tok_embeddings.weight if first_input == "ids" else main
            if stack is not None:
                cache = stack.setup_caches(main.shape[0], like)
            else:
                c = module.config
                cache = [StaticKVCache(main.shape[0], c.kv_heads, c.max_len, c.head_dim_k, main.dtype, main.device)]
        out = module(main, key_padding=key_padding, positions=positions, caches=cache)
        return out, cache

    return step


DECODER = Conventions(
    norm_placement="pre", activation="gelu_tanh", embedding_scale="none", norm_kind="rms_norm",
    positions="rope", ffn_kind="gated", pe_base=ROPE_THETA, sliding_window=SLIDING_WINDOW,
)
# Qwen2: biases on q, k and v, none on the output projection nor in the MLP; untied head
QWEN2_BIASES = ConfigSpace(biases={"attention": True, "attention_out": False, "ffn": False})

adapter = TorchModuleAdapter("static-mistral", [
    TorchEntry("rms_norm", make=lambda c: RMSNorm(c.d_model), forward=lambda m, x: m(x),
               conventions=Conventions(norm_kind="rms_norm")),
    TorchEntry("rope", make=lambda c: Rotary(), forward=lambda m, x, positions: m(x, positions),
               conventions=Conventions(pe_base=ROPE_THETA)),
    TorchEntry("gated_ffn", make=FeedForward, forward=lambda m, x: m(x),
               param_map={"gate.weight": "w1.weight", "up.weight": "w3.weight", "down.weight": "w2.weight"},
               supports=ConfigSpace(biases={"ffn": False})),
    TorchEntry("causal_self_attention", make=SingleAttention,
               forward=lambda m, x, key_padding=None, positions=None: m(x, key_padding, positions),
               param_map=lambda c: attention_map("", "attention.", c), conventions=DECODER,
               step=make_step("x"), derives_positions=True, supports=QWEN2_BIASES),
    TorchEntry("decoder_block", make=SingleBlock,
               forward=lambda m, x, key_padding=None, positions=None: m(x, key_padding, positions),
               param_map=lambda c: block_map("", "stack.layers.0.", c), conventions=DECODER,
               step=make_step("x"), derives_positions=True, supports=QWEN2_BIASES),
    TorchEntry("causal_lm", make=Transformer,
               forward=lambda m, ids, key_padding=None, positions=None: m(ids, key_padding, positions),
               param_map=lm_map, conventions=DECODER, step=make_step("ids"), derives_positions=True,
               supports=ConfigSpace(biases={"attention": True, "attention_out": False, "ffn": False}, tied=False)),
])
