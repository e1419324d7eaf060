# fmt: off
# ruff: noqa: E501  (the bug tables name these lines verbatim; they stay as written)
"""A Llama-3-style decoder for the third blind benchmark, written the way inference engines
write one in pure torch: a config dataclass, **attention as a tiled online softmax**
(FlashAttention's running max and running sum over blocks of keys, never the full score
matrix), a **paged KV cache** (fixed-size pages in one pool per layer, a block table per
row, a slot mapping per step, as vLLM lays it out), grouped-query attention by
``expand`` + ``reshape`` (Meta's ``repeat_kv``), RoPE by ``rotate_half`` (pairs (i, i + d/2))
with Llama 3.1's frequency scaling, RMSNorm, SwiGLU, an untied output head, no biases.

In float16/bfloat16 the RMSNorm statistics, the RoPE angles and the softmax (its running
max, sum and accumulator) are formed in float32; in float64 everything is float64.
"""

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.adapters.reference import LLAMA

PAGE_SIZE = 4  # tokens per KV page
KEY_BLOCK = 4  # keys per tile of the online softmax


@dataclass
class ModelArgs:
    dim: int = 32
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 8
    vocab_size: int = 40
    hidden_dim: int = 64
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    rope_scale_factor: float = 8.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_positions: int = 512
    max_seq_len: int = 512


def _work_dtype(t):
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        h = x.to(_work_dtype(x))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def scaled_inv_freq(args, head_dim, dtype, device):
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, head_dim, 2, dtype=dtype, device=device) / head_dim))
    low_freq_wavelen = args.rope_original_max_positions / args.rope_low_freq_factor
    high_freq_wavelen = args.rope_original_max_positions / args.rope_high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    smooth = (args.rope_original_max_positions / wavelen - args.rope_low_freq_factor) / (args.rope_high_freq_factor - args.rope_low_freq_factor)
    blended = (1 - smooth) * inv_freq / args.rope_scale_factor + smooth * inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / args.rope_scale_factor, blended)
    return torch.where(wavelen < high_freq_wavelen, inv_freq, scaled)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args

    def cos_sin(self, positions, head_dim, like):
        work = _work_dtype(like)
        inv_freq = scaled_inv_freq(self.args, head_dim, work, like.device)
        freqs = positions.to(work)[..., None] * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def forward(self, x, positions):  # x [B, H, L, d], positions [L] or [B, L]
        cos, sin = self.cos_sin(positions, x.shape[-1], x)
        if cos.dim() == 3:
            cos, sin = cos[:, None], sin[:, None]
        out = x.to(cos.dtype) * cos + rotate_half(x.to(cos.dtype)) * sin
        return out.to(x.dtype)


class PagedKVCache:
    """One pool of pages per layer, [n_slots, H_kv, d]; each row owns the pages its block
    table lists; the token at position t of row b lives in slot
    block_table[b][t // PAGE_SIZE] * PAGE_SIZE + t % PAGE_SIZE."""

    def __init__(self, n_layers, batch):
        self.k_pool = [None] * n_layers
        self.v_pool = [None] * n_layers
        self.block_table = [[] for _ in range(batch)]
        self.n_pages = 0
        self.seq_len = 0

    def slot_mapping(self, start, n, device):
        slots = []
        for row in self.block_table:
            while len(row) * PAGE_SIZE < start + n:
                row.append(self.n_pages)
                self.n_pages += 1
            slots.append([row[t // PAGE_SIZE] * PAGE_SIZE + t % PAGE_SIZE for t in range(start, start + n)])
        return torch.tensor(slots, dtype=torch.long, device=device)

    def write(self, layer, slots, k, v):
        n_slots = self.n_pages * PAGE_SIZE
        for pools, new in ((self.k_pool, k), (self.v_pool, v)):
            pool = pools[layer]
            if pool is None:
                pool = new.new_zeros((0, *new.shape[2:]))
            if pool.shape[0] < n_slots:
                pool = torch.cat([pool, pool.new_zeros((n_slots - pool.shape[0], *pool.shape[1:]))])
            pool = pool.index_put((slots.reshape(-1),), new.reshape(-1, *new.shape[2:]))
            pools[layer] = pool

    def read(self, layer, length, device):
        slots = self.slot_mapping(0, length, device)
        return self.k_pool[layer][slots], self.v_pool[layer][slots]  # [B, T, H_kv, d]


def repeat_kv(x, n_rep):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim).reshape(bs, slen, n_kv_heads * n_rep, head_dim)


def tiled_attention(q, k, v, q_start, keep):
    """softmax(q k^T / sqrt(d)) v over key tiles with a running max and sum.

    q [B, H, Lq, d], k/v [B, H, Lk, d]; query i sits at index q_start + i of the sequence and
    sees key j when j <= q_start + i and keep[b, j]. A query that sees no key gets zeros."""
    work = _work_dtype(q)
    q, k, v = q.to(work), k.to(work), v.to(work)
    B, H, Lq, _ = q.shape
    Lk = k.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    q_idx = torch.arange(q_start, q_start + Lq, device=q.device)
    m = torch.full((B, H, Lq, 1), float("-inf"), dtype=work, device=q.device)
    l = torch.zeros((B, H, Lq, 1), dtype=work, device=q.device)
    acc = torch.zeros((B, H, Lq, v.shape[-1]), dtype=work, device=q.device)
    for start in range(0, Lk, KEY_BLOCK):
        stop = min(start + KEY_BLOCK, Lk)
        k_idx = torch.arange(start, stop, device=q.device)
        allowed = (k_idx[None, :] <= q_idx[:, None])[None, None] & keep[:, None, None, start:stop]
        s = torch.matmul(q, k[:, :, start:stop].transpose(-2, -1)) * scale
        s = s.masked_fill(~allowed, float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0)
        p = torch.exp(s - m_safe)
        alpha = torch.exp(m - m_safe)
        l = l * alpha + p.sum(dim=-1, keepdim=True)
        acc = acc * alpha + torch.matmul(p, v[:, :, start:stop])
        m = m_new
    return acc / torch.where(l > 0, l, torch.ones_like(l))


class Attention(nn.Module):
    def __init__(self, args, layer_id=0):
        super().__init__()
        self.layer_id = layer_id
        self.n_heads = args.n_heads
        self.n_kv_heads = args.n_kv_heads
        self.n_rep = self.n_heads // self.n_kv_heads
        self.head_dim = args.head_dim
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)
        self.rotary = RotaryEmbedding(args)

    def forward(self, x, positions, keep, cache=None, slots=None):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xq = self.rotary(xq.transpose(1, 2), positions).transpose(1, 2)
        xk = self.rotary(xk.transpose(1, 2), positions).transpose(1, 2)
        start = 0
        if cache is not None:
            start = cache.seq_len
            cache.write(self.layer_id, slots, xk, xv)
            xk, xv = cache.read(self.layer_id, start + seqlen, x.device)
        keys = repeat_kv(xk, self.n_rep)
        values = repeat_kv(xv, self.n_rep)
        out = tiled_attention(xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2), start, keep)
        out = out.to(x.dtype).transpose(1, 2).reshape(bsz, seqlen, -1)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id, args):
        super().__init__()
        self.attention = Attention(args, layer_id)
        self.feed_forward = FeedForward(args.dim, args.hidden_dim)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, positions, keep, cache=None, slots=None):
        h = x + self.attention(self.attention_norm(x), positions, keep, cache, slots)
        out = h + self.feed_forward(self.ffn_norm(h))
        return out


class Transformer(nn.Module):
    def __init__(self, params):
        super().__init__()
        self.params = params
        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.layers = nn.ModuleList(TransformerBlock(i, params) for i in range(params.n_layers))
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)

    def forward(self, tokens, positions, keep, cache=None, slots=None):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, positions, keep, cache, slots)
        h = self.norm(h)
        return self.output(h)


# ---- the adapter

CONVENTIONS = replace(
    LLAMA,
    eps=1e-5,
    pe_base=500000.0,
    rope_scaling="llama3",
    rope_scaling_factor=8.0,
    rope_low_freq_factor=1.0,
    rope_high_freq_factor=4.0,
    rope_original_max_positions=512,
)


def _args(config):
    return ModelArgs(
        dim=config.d_model,
        n_layers=config.n_layers,
        n_heads=config.n_heads,
        n_kv_heads=config.kv_heads,
        head_dim=config.head_dim_k,
        vocab_size=config.vocab_size,
        hidden_dim=config.d_ff,
        max_seq_len=config.max_len,
    )


def _keep(x, key_padding, start):
    if key_padding is None:
        return torch.ones((x.shape[0], start + x.shape[1]), dtype=torch.bool, device=x.device)
    return key_padding.bool()


def _positions(x, positions, start=0):
    if positions is None:
        return torch.arange(start, start + x.shape[1], device=x.device)[None].expand(x.shape[0], -1)
    return positions


def _call(module, x, key_padding, positions, cache):
    """One call of any decoder subject, full (cache None) or a paged step."""
    slots = None
    start = 0 if cache is None else cache.seq_len
    if cache is not None:
        slots = cache.slot_mapping(start, x.shape[1], x.device)
    keep = _keep(x, key_padding, start)
    out = module(x, _positions(x, positions, start), keep, cache, slots)
    if cache is not None:
        cache.seq_len = start + x.shape[1]
    return out


def _forward(module, x, key_padding=None, positions=None):
    return _call(module, x, key_padding, positions, None)


def _step(module, cache, x, key_padding=None, positions=None):
    if cache is None:
        cache = PagedKVCache(len(getattr(module, "layers", [module])), x.shape[0])
    return _call(module, x, key_padding, positions, cache), cache


def _forward_lm(model, ids, key_padding=None, positions=None):
    return _forward(model, ids, key_padding, positions)


def _step_lm(model, cache, ids, key_padding=None, positions=None):
    return _step(model, cache, ids, key_padding, positions)


_ATTN = {"q": "wq", "k": "wk", "v": "wv", "o": "wo"}
_FFN = {"gate": "w1", "up": "w3", "down": "w2"}


def _block_map(ours, theirs):
    mapping = {f"{ours}self_attn.{c}.weight": f"{theirs}attention.{t}.weight" for c, t in _ATTN.items()}
    mapping |= {f"{ours}ffn.{c}.weight": f"{theirs}feed_forward.{t}.weight" for c, t in _FFN.items()}
    mapping[f"{ours}norm1.weight"] = f"{theirs}attention_norm.weight"
    mapping[f"{ours}norm2.weight"] = f"{theirs}ffn_norm.weight"
    return mapping


def _lm_map(config):
    mapping = {"embedding.weight": "tok_embeddings.weight", "norm.weight": "norm.weight", "lm_head.weight": "output.weight"}
    for i in range(config.n_layers):
        mapping |= _block_map(f"layers.{i}.", f"layers.{i}.")
    return mapping


_NO_BIAS = {"attention_bias": False, "attention_out_bias": False, "ffn_bias": False}

adapter = TorchModuleAdapter("blind3-paged-llama", [
    TorchEntry(
        "rms_norm",
        make=lambda c: RMSNorm(c.d_model, eps=1e-5),
        forward=lambda m, x: m(x),
        conventions=CONVENTIONS,
    ),
    TorchEntry(
        "rope",
        make=lambda c: RotaryEmbedding(_args(c)),
        forward=lambda m, x, positions: m(x, positions),
        conventions=CONVENTIONS,
    ),
    TorchEntry(
        "gated_ffn",
        make=lambda c: FeedForward(c.d_model, c.d_ff),
        forward=lambda m, x: m(x),
        param_map={f"{c}.weight": f"{t}.weight" for c, t in _FFN.items()},
        conventions=CONVENTIONS,
        config={"ffn_bias": False},
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda c: Attention(_args(c)),
        forward=_forward,
        step=_step,
        derives_positions=True,
        param_map={f"{c}.weight": f"{t}.weight" for c, t in _ATTN.items()},
        conventions=CONVENTIONS,
        config=_NO_BIAS,
    ),
    TorchEntry(
        "decoder_block",
        make=lambda c: TransformerBlock(0, _args(c)),
        forward=_forward,
        step=_step,
        derives_positions=True,
        param_map=_block_map("", ""),
        conventions=CONVENTIONS,
        config=_NO_BIAS,
    ),
    TorchEntry(
        "causal_lm",
        make=lambda c: Transformer(_args(c)),
        forward=_forward_lm,
        step=_step_lm,
        derives_positions=True,
        param_map=_lm_map,
        conventions=CONVENTIONS,
        config={**_NO_BIAS, "tie_weights": False},
    ),
])
