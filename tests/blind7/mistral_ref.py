# fmt: off
# ruff: noqa
"""A Mistral-style decoder written the way Meta's llama ``model.py`` and mistral-src write it.

RoPE by complex numbers: ``precompute_freqs_cis`` builds ``torch.polar`` of the angles, and
``apply_rotary_emb`` views neighbouring pairs ``(x[2i], x[2i+1])`` as one complex number
(``torch.view_as_complex``) and multiplies; grouped-query attention by
``torch.repeat_interleave`` of the key/value heads; a sliding-window causal mask built with
``tril`` / ``triu`` and ``log``; a KV cache pre-allocated for the longest sequence and written
by slice (``cache_k[:bsz, start_pos : start_pos + seqlen] = xk``); RMSNorm; SwiGLU as
``w2(silu(w1(x)) * w3(x))``; no biases. The statistics, the softmax and the complex rotation
run in float32 when the activations are 16-bit (``.float()`` then ``type_as``).
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


@dataclass
class ModelArgs:
    dim: int
    n_heads: int
    n_kv_heads: int
    hidden_dim: int
    max_seq_len: int
    sliding_window: int = 5
    norm_eps: float = 1e-5
    rope_theta: float = 1000000.0


def _args(config):
    return ModelArgs(
        dim=config.d_model, n_heads=config.n_heads, n_kv_heads=config.n_kv_heads or config.n_heads,
        hidden_dim=config.d_ff, max_seq_len=config.max_len,
    )


def _upcast(x):
    # Meta's code writes x.float(); keep float64 as it is so that the float64 build stays exact
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(_upcast(x)).type_as(x)
        return output * self.weight


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64)[: (dim // 2)] / dim))
    t = torch.arange(end, dtype=torch.float64)
    freqs = torch.outer(t, freqs)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex128
    return freqs_cis


def reshape_for_broadcast(freqs_cis, x):
    # freqs_cis [B, L, d/2] or [L, d/2]; x [B, L, H, d/2]
    if freqs_cis.dim() == 2:
        return freqs_cis.view(1, x.shape[1], 1, x.shape[-1])
    return freqs_cis.view(x.shape[0], x.shape[1], 1, x.shape[-1])


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(_upcast(xq).reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(_upcast(xk).reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_).to(xq_.dtype)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(keys, values, repeats: int):
    keys = torch.repeat_interleave(keys, repeats=repeats, dim=2)
    values = torch.repeat_interleave(values, repeats=repeats, dim=2)
    return keys, values


class KVCache:
    """Pre-allocated for max_seq_len tokens; the next tokens are written at start_pos."""

    def __init__(self, bsz, args, dtype):
        head_dim = args.dim // args.n_heads
        self.cache_k = torch.zeros((bsz, args.max_seq_len, args.n_kv_heads, head_dim), dtype=dtype)
        self.cache_v = torch.zeros((bsz, args.max_seq_len, args.n_kv_heads, head_dim), dtype=dtype)
        self.start_pos = 0


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.n_heads = args.n_heads
        self.n_kv_heads = args.n_kv_heads
        self.repeats = self.n_heads // self.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.scale = self.head_dim ** -0.5
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def forward(self, x, freqs_cis, mask, cache=None):
        bsz, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        if cache is None:
            keys, values = xk, xv
        else:
            start_pos = cache.start_pos
            cache.cache_k[:bsz, start_pos : start_pos + seqlen] = xk
            cache.cache_v[:bsz, start_pos : start_pos + seqlen] = xv
            keys = cache.cache_k[:bsz, : start_pos + seqlen]
            values = cache.cache_v[:bsz, : start_pos + seqlen]
        keys, values = repeat_kv(keys, values, self.repeats)
        xq = xq.transpose(1, 2)  # (bs, n_heads, seqlen, head_dim)
        keys = keys.transpose(1, 2)
        values = values.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) * self.scale
        if mask is not None:
            scores = scores + mask  # (bs, n_heads, seqlen, cache_len + seqlen)
        scores = F.softmax(_upcast(scores), dim=-1).type_as(xq)
        output = torch.matmul(scores, values)  # (bs, n_heads, seqlen, head_dim)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.w1 = nn.Linear(args.dim, args.hidden_dim, bias=False)
        self.w2 = nn.Linear(args.hidden_dim, args.dim, bias=False)
        self.w3 = nn.Linear(args.dim, args.hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, freqs_cis, mask, cache=None):
        r = self.attention(self.attention_norm(x), freqs_cis, mask, cache)
        h = x + r
        r = self.feed_forward(self.ffn_norm(h))
        out = h + r
        return out


def build_mask(seqlen, start_pos, sliding_window, key_padding, dtype):
    """Additive [B or 1, 1, seqlen, start_pos + seqlen] mask: causal, windowed, padded."""
    total = start_pos + seqlen
    mask = torch.full((seqlen, total), fill_value=1.0, dtype=dtype)
    mask = torch.tril(mask, diagonal=start_pos)
    # make the mask banded to account for the sliding window
    mask = torch.triu(mask, diagonal=start_pos - sliding_window + 1)
    if key_padding is not None:
        mask = mask[None] * key_padding[:, None, :total].to(dtype)
    mask = torch.log(mask)
    return mask.unsqueeze(-3)


class Mistral(nn.Module):
    """The pieces the adapter runs, with the RoPE table and the cache logic around them."""

    def __init__(self, args, part):
        super().__init__()
        self.args = args
        if part == "block":
            self.layer = TransformerBlock(args)
        else:
            self.layer = Attention(args)
        self._freqs_cis = None

    @property
    def freqs_cis(self):
        # kept out of the buffers so that module.to(float16) does not round it
        if self._freqs_cis is None:
            self._freqs_cis = precompute_freqs_cis(
                self.args.dim // self.args.n_heads, self.args.max_seq_len * 2, self.args.rope_theta
            )
        return self._freqs_cis

    def forward(self, x, key_padding=None, positions=None, cache=None):
        bsz, seqlen, _ = x.shape
        start_pos = 0 if cache is None else cache.start_pos
        if positions is None:
            freqs_cis = self.freqs_cis[start_pos : start_pos + seqlen]
        else:
            freqs_cis = self.freqs_cis[positions]
        mask = build_mask(seqlen, start_pos, self.args.sliding_window, key_padding, x.dtype)
        out = self.layer(x, freqs_cis, mask, cache)
        if cache is not None:
            cache.start_pos += seqlen
        return out


# ---- the adapter ----

def _kp(key_padding):
    return None if key_padding is None else torch.as_tensor(key_padding, dtype=torch.bool)


def _pos(positions):
    return None if positions is None else torch.as_tensor(positions, dtype=torch.long)


def _forward(model, x, key_padding=None, positions=None):
    return model(x, key_padding=_kp(key_padding), positions=_pos(positions))


def _step(model, cache, x, key_padding=None, positions=None):
    if cache is None:
        cache = KVCache(x.shape[0], model.args, x.dtype)
    out = model(x, key_padding=_kp(key_padding), positions=_pos(positions), cache=cache)
    return out, cache


class RopeOnly(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.head_dim = config.d_model // config.n_heads
        self.max_len = config.max_len

    def forward(self, x, positions):
        # x [B, H, L, d] -> Meta's [B, L, H, d]
        xt = x.transpose(1, 2)
        pos = torch.as_tensor(positions, dtype=torch.long)
        end = max(self.max_len * 2, int(pos.max()) + 1)
        freqs_cis = precompute_freqs_cis(self.head_dim, end, 1000000.0)[pos]
        xq_out, _ = apply_rotary_emb(xt, xt, freqs_cis)
        return xq_out.transpose(1, 2)


_ATTN = {"q.weight": "wq.weight", "k.weight": "wk.weight", "v.weight": "wv.weight", "o.weight": "wo.weight"}
_BLOCK = {f"self_attn.{k}": f"attention.{v}" for k, v in _ATTN.items()}
_BLOCK |= {"norm1.weight": "attention_norm.weight", "norm2.weight": "ffn_norm.weight"}
_BLOCK |= {"ffn.gate.weight": "feed_forward.w1.weight", "ffn.up.weight": "feed_forward.w3.weight"}
_BLOCK |= {"ffn.down.weight": "feed_forward.w2.weight"}

MISTRAL = Conventions(
    norm_placement="pre", activation="gelu_tanh", norm_kind="rms_norm", eps=1e-5, positions="rope", ffn_kind="gated",
    embedding_scale="none", pe_base=1000000.0, rope_layout="interleaved", sliding_window=5,
    fully_masked_rows="nan",
)
FIXED = {"bias": False, "n_kv_heads": 2}

adapter = TorchModuleAdapter("mistral_ref", [
    TorchEntry(
        "rms_norm", make=lambda config: RMSNorm(config.d_model, eps=1e-5), forward=lambda m, x: m(x),
        conventions=MISTRAL,
    ),
    TorchEntry("rope", make=RopeOnly, forward=lambda m, x, positions: m(x, positions), conventions=MISTRAL),
    TorchEntry(
        "gated_ffn", make=lambda config: FeedForward(_args(config)), forward=lambda m, x: m(x),
        param_map={"gate.weight": "w1.weight", "up.weight": "w3.weight", "down.weight": "w2.weight"},
        conventions=MISTRAL, config={"bias": False},
    ),
    TorchEntry(
        "causal_self_attention", make=lambda config: Mistral(_args(config), "attention"), forward=_forward,
        step=_step, derives_positions=True, conventions=MISTRAL, config=FIXED,
        param_map={k: f"layer.{v}" for k, v in _ATTN.items()},
    ),
    TorchEntry(
        "decoder_block", make=lambda config: Mistral(_args(config), "block"), forward=_forward,
        step=_step, derives_positions=True, conventions=MISTRAL, config=FIXED,
        param_map={k: f"layer.{v}" for k, v in _BLOCK.items()},
    ),
])
