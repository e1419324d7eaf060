# fmt: off
# ruff: noqa
"""A Mistral decoder as mistralai/mistral-src writes it: ModelArgs, RMSNorm, complex-valued
RoPE (``torch.polar``, ``view_as_complex``), grouped-query attention with ``repeat_kv``,
sliding-window attention and a *rotating buffer* KV cache (slot = token index % window,
read back in token order by ``unrotate``), SwiGLU ``w2(silu(w1 x) * w3 x)``.

Written for the tenth blind benchmark (tests/blind10/PROTOCOL.md)."""

from dataclasses import dataclass
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelArgs:
    dim: int
    n_layers: int
    head_dim: int
    hidden_dim: int
    n_heads: int
    n_kv_heads: int
    norm_eps: float
    vocab_size: int
    sliding_window: int
    rope_theta: float = 10000.0


SLIDING_WINDOW = 6


def _accum(dtype):
    # 16-bit inputs are computed in float32 where mistral-src calls .float(); float64 stays float64
    return torch.promote_types(dtype, torch.float32)


def precompute_freqs(dim: int, theta: float) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64)[: (dim // 2)] / dim))


def freqs_cis_at(positions: torch.Tensor, dim: int, theta: float) -> torch.Tensor:
    freqs = precompute_freqs(dim, theta)
    angles = positions.to(torch.float64)[..., None] * freqs
    return torch.polar(torch.ones_like(angles), angles)


def apply_rotary_emb(xq: torch.Tensor, xk: torch.Tensor, freqs_cis: torch.Tensor):
    # xq, xk [B, L, H, hd]; freqs_cis [B, L, hd/2] (complex128)
    dtype = _accum(xq.dtype)
    xq_ = torch.view_as_complex(xq.to(dtype).reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.to(dtype).reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis[:, :, None, :].to(xq_.dtype)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(keys: torch.Tensor, values: torch.Tensor, repeats: int):
    keys = torch.repeat_interleave(keys, repeats=repeats, dim=2)
    values = torch.repeat_interleave(values, repeats=repeats, dim=2)
    return keys, values


class RotatingBufferCache:
    """Per layer: keys and values of the last ``sliding_window`` tokens at slot ``index % W``,
    with each slot's keep flag (key padding); ``seqlen`` tokens seen so far."""

    def __init__(self, n_layers: int, batch: int, sliding_window: int, n_kv_heads: int, head_dim: int, dtype):
        self.sliding_window = sliding_window
        self.cache_k = torch.zeros((n_layers, batch, sliding_window, n_kv_heads, head_dim), dtype=dtype)
        self.cache_v = torch.zeros((n_layers, batch, sliding_window, n_kv_heads, head_dim), dtype=dtype)
        self.cache_keep = torch.ones((n_layers, batch, sliding_window), dtype=torch.bool)
        self.seqlen = 0

    def unrotate(self, layer: int, t: torch.Tensor) -> torch.Tensor:
        # the cached tokens in token order: the oldest is at slot seqlen % W once the buffer is full
        W = self.sliding_window
        if self.seqlen < W:
            return t[:, : self.seqlen]
        position = self.seqlen % W
        return torch.cat([t[:, position:], t[:, :position]], dim=1)

    def interleave_kv(self, layer: int, xk: torch.Tensor, xv: torch.Tensor, keep: torch.Tensor):
        """The cached keys (in token order) followed by the new ones, and their keep flags."""
        past_k = self.unrotate(layer, self.cache_k[layer])
        past_v = self.unrotate(layer, self.cache_v[layer])
        past_keep = self.unrotate(layer, self.cache_keep[layer])
        keys = torch.cat([past_k, xk], dim=1)
        values = torch.cat([past_v, xv], dim=1)
        return keys, values, torch.cat([past_keep, keep], dim=1)

    def update(self, layer: int, xk: torch.Tensor, xv: torch.Tensor, keep: torch.Tensor):
        W = self.sliding_window
        seqlen = xk.shape[1]
        positions = torch.arange(self.seqlen, self.seqlen + seqlen)[-W:]
        scatter_pos = positions % W
        self.cache_k[layer][:, scatter_pos] = xk[:, -W:]
        self.cache_v[layer][:, scatter_pos] = xv[:, -W:]
        self.cache_keep[layer][:, scatter_pos] = keep[:, -W:]


def sliding_window_mask(q_index: torch.Tensor, k_index: torch.Tensor, window: int) -> torch.Tensor:
    """Keep-mask [Lq, Lk] from token indices: causal and within the last ``window`` keys."""
    diff = q_index[:, None] - k_index[None, :]
    return (diff >= 0) & (diff < window)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.n_heads: int = args.n_heads
        self.n_kv_heads: int = args.n_kv_heads
        self.repeats = self.n_heads // self.n_kv_heads
        self.sliding_window = self.args.sliding_window
        self.scale = self.args.head_dim ** -0.5
        self.wq = nn.Linear(args.dim, args.n_heads * args.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * args.head_dim, args.dim, bias=False)

    def forward(self, x, freqs_cis, keep, cache: Optional[RotatingBufferCache] = None, layer: int = 0):
        # keep [B, T]: key padding over every token so far (cached and new)
        bsz, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bsz, seqlen, self.n_heads, self.args.head_dim)
        xk = xk.view(bsz, seqlen, self.n_kv_heads, self.args.head_dim)
        xv = xv.view(bsz, seqlen, self.n_kv_heads, self.args.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        start = 0 if cache is None else cache.seqlen
        new_keep = keep[:, start:]
        if cache is None:
            key, value, key_keep = xk, xv, new_keep
            k_index = torch.arange(seqlen)
        else:
            key, value, key_keep = cache.interleave_kv(layer, xk, xv, new_keep)
            k_index = torch.arange(start + seqlen - key.shape[1], start + seqlen)
            cache.update(layer, xk, xv, new_keep)
        q_index = torch.arange(start, start + seqlen)
        mask = sliding_window_mask(q_index, k_index, self.sliding_window)
        mask = mask[None, None] & key_keep[:, None, None, :]
        key, value = repeat_kv(key, value, self.repeats)
        query, key, value = xq.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
        scores = torch.matmul(query, key.transpose(2, 3)) * self.scale
        scores = scores.to(_accum(scores.dtype))
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        scores = F.softmax(scores, dim=-1).type_as(query)
        output = torch.matmul(scores, value)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.w1 = nn.Linear(args.dim, args.hidden_dim, bias=False)
        self.w2 = nn.Linear(args.hidden_dim, args.dim, bias=False)
        self.w3 = nn.Linear(args.dim, args.hidden_dim, bias=False)

    def forward(self, x) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.to(_accum(x.dtype))).type_as(x)
        return output * self.weight


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads = args.n_heads
        self.dim = args.dim
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args=args)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.args = args

    def forward(self, x, freqs_cis, keep, cache=None, layer: int = 0):
        r = self.attention.forward(self.attention_norm(x), freqs_cis, keep, cache, layer)
        h = x + r
        r = self.feed_forward.forward(self.ffn_norm(h))
        out = h + r
        return out


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.vocab_size = args.vocab_size
        self.n_layers = args.n_layers
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = torch.nn.ModuleList([TransformerBlock(args=args) for _ in range(args.n_layers)])
        self.norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)

    def forward(self, input_ids, positions, keep, cache=None):
        h = self.tok_embeddings(input_ids)
        freqs_cis = freqs_cis_at(positions, self.args.head_dim, self.args.rope_theta)
        for layer_id, layer in enumerate(self.layers):
            h = layer(h, freqs_cis, keep, cache, layer_id)
        return self.output(self.norm(h))


# ---- the adapter -----------------------------------------------------------------------

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def model_args(config) -> ModelArgs:
    return ModelArgs(
        dim=config.d_model, n_layers=config.n_layers, head_dim=config.d_model // config.n_heads,
        hidden_dim=config.d_ff, n_heads=config.n_heads, n_kv_heads=config.n_kv_heads or config.n_heads,
        norm_eps=1e-5, vocab_size=config.vocab_size, sliding_window=SLIDING_WINDOW,
    )


class Rope(nn.Module):
    """The rotation alone, on x [.., L, d] at positions [L] or [B, L]."""

    def __init__(self, config):
        super().__init__()
        self.theta = 10000.0

    def forward(self, x, positions):
        d = x.shape[-1]
        if d % 2:
            raise ValueError(f"RoPE needs an even width, got {d}")
        lead = x.shape[:-2]
        flat = x.reshape(-1, *x.shape[-2:])[:, :, None, :]  # [N, L, 1, d]
        pos = positions if positions.dim() == 1 else positions.reshape(-1, positions.shape[-1])
        freqs_cis = freqs_cis_at(pos, d, self.theta)
        if freqs_cis.dim() == 2:
            freqs_cis = freqs_cis[None].expand(flat.shape[0], -1, -1)
        else:  # [B, L] positions for x [B, H, L, d]
            freqs_cis = freqs_cis[:, None].expand(-1, flat.shape[0] // freqs_cis.shape[0], -1, -1).reshape(flat.shape[0], *freqs_cis.shape[1:])
        out, _ = apply_rotary_emb(flat, flat, freqs_cis)
        return out[:, :, 0, :].reshape(*lead, *x.shape[-2:])


def _positions(x, positions, start=0):
    B, n = x.shape[:2]
    if positions is None:
        return torch.arange(start, start + n)[None].expand(B, n)
    return positions


def _keep(x, key_padding, total):
    if key_padding is None:
        return torch.ones((x.shape[0], total), dtype=torch.bool)
    return key_padding.bool()


def attention_forward(m, x, key_padding=None, positions=None):
    freqs_cis = freqs_cis_at(_positions(x, positions), m.args.head_dim, m.args.rope_theta)
    return m(x, freqs_cis, _keep(x, key_padding, x.shape[1]))


def block_forward(m, x, key_padding=None, positions=None):
    freqs_cis = freqs_cis_at(_positions(x, positions), m.args.head_dim, m.args.rope_theta)
    return m(x, freqs_cis, _keep(x, key_padding, x.shape[1]))


def lm_forward(m, ids, key_padding=None, positions=None):
    return m(ids, _positions(ids, positions), _keep(ids, key_padding, ids.shape[1]))


def _new_cache(m, x, n_layers):
    args = m.args
    dtype = next(m.parameters()).dtype
    return RotatingBufferCache(n_layers, x.shape[0], args.sliding_window, args.n_kv_heads, args.head_dim, dtype)


def attention_step(m, cache, x, key_padding=None, positions=None):
    cache = cache if cache is not None else _new_cache(m, x, 1)
    total = cache.seqlen + x.shape[1]
    freqs_cis = freqs_cis_at(_positions(x, positions, cache.seqlen), m.args.head_dim, m.args.rope_theta)
    out = m(x, freqs_cis, _keep(x, key_padding, total), cache, 0)
    cache.seqlen = total
    return out, cache


def block_step(m, cache, x, key_padding=None, positions=None):
    cache = cache if cache is not None else _new_cache(m, x, 1)
    total = cache.seqlen + x.shape[1]
    freqs_cis = freqs_cis_at(_positions(x, positions, cache.seqlen), m.args.head_dim, m.args.rope_theta)
    out = m(x, freqs_cis, _keep(x, key_padding, total), cache, 0)
    cache.seqlen = total
    return out, cache


def lm_step(m, cache, ids, key_padding=None, positions=None):
    cache = cache if cache is not None else _new_cache(m, ids, m.n_layers)
    total = cache.seqlen + ids.shape[1]
    out = m(ids, _positions(ids, positions, cache.seqlen), _keep(ids, key_padding, total), cache)
    cache.seqlen = total
    return out, cache


def _attn_map(prefix, mine):
    return {f"{prefix}{c}.weight": f"{mine}w{c}.weight" for c in "qkvo"}


def _block_map(prefix, mine):
    out = _attn_map(prefix + "self_attn.", mine + "attention.")
    out |= {f"{prefix}norm1.weight": f"{mine}attention_norm.weight", f"{prefix}norm2.weight": f"{mine}ffn_norm.weight"}
    out |= {f"{prefix}ffn.{c}.weight": f"{mine}feed_forward.{w}.weight" for c, w in (("gate", "w1"), ("down", "w2"), ("up", "w3"))}
    return out


def _lm_map(config):
    out = {"embedding.weight": "tok_embeddings.weight", "norm.weight": "norm.weight", "lm_head.weight": "output.weight"}
    for i in range(config.n_layers):
        out |= _block_map(f"layers.{i}.", f"layers.{i}.")
    return out


MISTRAL = Conventions(
    norm_placement="pre", norm_kind="rms_norm", eps=1e-5, positions="rope", rope_layout="interleaved",
    ffn_kind="gated", gate_activation="silu", embedding_scale="none", activation="gelu_tanh",
    sliding_window=SLIDING_WINDOW, fully_masked_rows="uniform",
)
FIXED = {"n_kv_heads": 2, "bias": False}

adapter = TorchModuleAdapter("rolling-mistral", [
    TorchEntry("rms_norm", make=lambda c: RMSNorm(c.d_model, eps=1e-5), forward=lambda m, x: m(x),
               conventions=Conventions(norm_kind="rms_norm", eps=1e-5)),
    TorchEntry("rope", make=Rope, forward=lambda m, x, positions: m(x, positions),
               conventions=Conventions(rope_layout="interleaved")),
    TorchEntry("gated_ffn", make=lambda c: FeedForward(model_args(c)), forward=lambda m, x: m(x),
               param_map={"gate.weight": "w1.weight", "down.weight": "w2.weight", "up.weight": "w3.weight"},
               conventions=MISTRAL, config={"bias": False}),
    TorchEntry("causal_self_attention", make=lambda c: Attention(model_args(c)), forward=attention_forward,
               param_map=_attn_map("", ""), conventions=MISTRAL, step=attention_step, derives_positions=True,
               config=FIXED),
    TorchEntry("decoder_block", make=lambda c: TransformerBlock(model_args(c)), forward=block_forward,
               param_map=_block_map("", ""), conventions=MISTRAL, step=block_step, derives_positions=True,
               config=FIXED),
    TorchEntry("causal_lm", make=lambda c: Transformer(model_args(c)), forward=lm_forward,
               param_map=_lm_map, conventions=MISTRAL, step=lm_step, derives_positions=True,
               config={**FIXED, "tie_weights": False}),
])
