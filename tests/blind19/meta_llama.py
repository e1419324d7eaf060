# fmt: off
# ruff: noqa
"""A decoder as Meta's original llama reference writes it (`llama/model.py`): complex RoPE
(`precompute_freqs_cis` with `torch.polar`, `reshape_for_broadcast`, `apply_rotary_emb`
through `view_as_complex` / `view_as_real`: interleaved pairs), `RMSNorm` normalising
`x.float()`, grouped-query attention with `repeat_kv`, a preallocated `cache_k` / `cache_v`
written at `start_pos`, the `-inf` triu mask widened by `hstack` for cached calls, SwiGLU
`w2(F.silu(w1(x)) * w3(x))`, an untied `output`."""
import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelArgs:
    dim: int = 32
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: Optional[int] = None
    vocab_size: int = 40
    hidden_dim: int = 64
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_batch_size: int = 64
    max_seq_len: int = 512


def _up(t):
    # Meta's `.float()`: 16-bit to float32; float32 and float64 stay as they are
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0, dtype=torch.float32):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64)[: (dim // 2)] / dim))
    t = torch.arange(end, device=freqs.device, dtype=torch.float64)
    freqs = torch.outer(t, freqs).to(dtype)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex64 or complex128
    return freqs_cis


def reshape_for_broadcast(freqs_cis: torch.Tensor, x: torch.Tensor):
    ndim = x.ndim
    assert 0 <= 1 < ndim
    assert freqs_cis.shape == (x.shape[1], x.shape[-1])
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq, xk, freqs_cis):
    real = freqs_cis.real.dtype
    xq_ = torch.view_as_complex(xq.to(real).reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.to(real).reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """torch.repeat_interleave(x, dim=2, repeats=n_rep)"""
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (
        x[:, :, :, None, :]
        .expand(bs, slen, n_kv_heads, n_rep, head_dim)
        .reshape(bs, slen, n_kv_heads * n_rep, head_dim)
    )


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_kv_heads = args.n_heads if args.n_kv_heads is None else args.n_kv_heads
        self.n_local_heads = args.n_heads
        self.n_local_kv_heads = self.n_kv_heads
        self.n_rep = self.n_local_heads // self.n_local_kv_heads
        self.head_dim = args.dim // args.n_heads

        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

        self.cache_k = torch.zeros(
            (args.max_batch_size, args.max_seq_len, self.n_local_kv_heads, self.head_dim)
        )
        self.cache_v = torch.zeros(
            (args.max_batch_size, args.max_seq_len, self.n_local_kv_heads, self.head_dim)
        )

    def forward(self, x, start_pos: int, freqs_cis, mask: Optional[torch.Tensor]):
        bsz, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)

        xq = xq.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)

        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)

        self.cache_k = self.cache_k.to(xq)
        self.cache_v = self.cache_v.to(xq)

        self.cache_k[:bsz, start_pos : start_pos + seqlen] = xk
        self.cache_v[:bsz, start_pos : start_pos + seqlen] = xv

        keys = self.cache_k[:bsz, : start_pos + seqlen]
        values = self.cache_v[:bsz, : start_pos + seqlen]

        # repeat k/v heads if n_kv_heads < n_heads
        keys = repeat_kv(keys, self.n_rep)  # (bs, cache_len + seqlen, n_local_heads, head_dim)
        values = repeat_kv(values, self.n_rep)  # (bs, cache_len + seqlen, n_local_heads, head_dim)

        xq = xq.transpose(1, 2)  # (bs, n_local_heads, seqlen, head_dim)
        keys = keys.transpose(1, 2)  # (bs, n_local_heads, cache_len + seqlen, head_dim)
        values = values.transpose(1, 2)  # (bs, n_local_heads, cache_len + seqlen, head_dim)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask  # (bs, n_local_heads, seqlen, cache_len + seqlen)
        scores = F.softmax(_up(scores), dim=-1).type_as(xq)
        output = torch.matmul(scores, values)  # (bs, n_local_heads, seqlen, head_dim)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.n_heads = args.n_heads
        self.dim = args.dim
        self.head_dim = args.dim // args.n_heads
        self.attention = Attention(args)
        self.feed_forward = FeedForward(dim=args.dim, hidden_dim=args.hidden_dim)
        self.layer_id = layer_id
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, start_pos: int, freqs_cis, mask: Optional[torch.Tensor]):
        h = x + self.attention(self.attention_norm(x), start_pos, freqs_cis, mask)
        out = h + self.feed_forward(self.ffn_norm(h))
        return out


def build_mask(seqlen: int, start_pos: int, h, key_padding=None):
    """Meta's causal mask (widened by hstack for cached calls), plus the padding bias."""
    mask = None
    if seqlen > 1:
        mask = torch.full((seqlen, seqlen), float("-inf"), device=h.device)
        mask = torch.triu(mask, diagonal=1)
        # When performing key-value caching, we compute the attention scores
        # only for the new sequence. Thus, the matrix of scores is of size
        # (seqlen, cache_len + seqlen), and the only masked entries are (i, j) for
        # j > cache_len + i, since row i corresponds to token cache_len + i.
        mask = torch.hstack([torch.zeros((seqlen, start_pos), device=h.device), mask]).type_as(h)
    if key_padding is not None:
        pad = torch.zeros(key_padding.shape, dtype=h.dtype).masked_fill(~key_padding, torch.finfo(h.dtype).min)
        pad = pad[:, None, None, :]
        mask = pad if mask is None else mask + pad
    return mask


class Transformer(nn.Module):
    def __init__(self, params: ModelArgs):
        super().__init__()
        self.params = params
        self.vocab_size = params.vocab_size
        self.n_layers = params.n_layers

        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)

        self.layers = torch.nn.ModuleList()
        for layer_id in range(params.n_layers):
            self.layers.append(TransformerBlock(layer_id, params))

        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)

        self.freqs_cis = precompute_freqs_cis(
            self.params.dim // self.params.n_heads, self.params.max_seq_len * 2, self.params.rope_theta
        )

    def forward(self, tokens: torch.Tensor, start_pos: int, key_padding=None):
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        self.freqs_cis = rope_table(self.params, h.dtype)
        freqs_cis = self.freqs_cis[start_pos : start_pos + seqlen]

        mask = build_mask(seqlen, start_pos, h, key_padding)

        for layer in self.layers:
            h = layer(h, start_pos, freqs_cis, mask)
        h = self.norm(h)
        output = _up(self.output(h))
        return output


def rope_table(args: ModelArgs, dtype):
    # the angles in float64 for a float64 model, float32 otherwise (Meta's complex64)
    real = torch.float64 if dtype == torch.float64 else torch.float32
    return precompute_freqs_cis(args.dim // args.n_heads, args.max_seq_len * 2, args.rope_theta, real)


# ---- the adapter
from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions

MAX_LEN = 512


def args_of(config) -> ModelArgs:
    return ModelArgs(
        dim=config.d_model, n_layers=config.n_layers, n_heads=config.n_heads,
        n_kv_heads=config.n_kv_heads, vocab_size=config.vocab_size, hidden_dim=config.d_ff,
        max_seq_len=MAX_LEN,
    )


def _inner(module, x, start_pos, key_padding):
    # attention or block alone: the table and the mask as Transformer.forward makes them
    args = module.args
    freqs_cis = rope_table(args, x.dtype)[start_pos : start_pos + x.shape[1]]
    mask = build_mask(x.shape[1], start_pos, x, key_padding)
    return module.inner(x, start_pos, freqs_cis, mask)


class Holder(nn.Module):
    def __init__(self, inner, args):
        super().__init__()
        self.inner = inner
        self.args = args


def _fwd_inner(module, x, key_padding=None, positions=None):
    return _inner(module, x, 0, key_padding)


def _step_inner(module, cache, x, key_padding=None, positions=None):
    start = 0 if cache is None else cache
    return _inner(module, x, start, key_padding), start + x.shape[1]


def _fwd_lm(model, ids, key_padding=None, positions=None):
    return model(ids, 0, key_padding)


def _step_lm(model, cache, ids, key_padding=None, positions=None):
    start = 0 if cache is None else cache
    return model(ids, start, key_padding), start + ids.shape[1]


def _attn_map(prefix, mine):
    return {f"{prefix}{c}.weight": f"{mine}{m}.weight" for c, m in (("q", "wq"), ("k", "wk"), ("v", "wv"), ("o", "wo"))}


def _ffn_map(prefix, mine):
    return {f"{prefix}{c}.weight": f"{mine}{m}.weight" for c, m in (("gate", "w1"), ("up", "w3"), ("down", "w2"))}


def _block_map(prefix, mine):
    m = _attn_map(prefix + "self_attn.", mine + "attention.")
    m |= _ffn_map(prefix + "ffn.", mine + "feed_forward.")
    m |= {prefix + "norm1.weight": mine + "attention_norm.weight", prefix + "norm2.weight": mine + "ffn_norm.weight"}
    return m


def _lm_map(config):
    m = {"embedding.weight": "tok_embeddings.weight", "norm.weight": "norm.weight", "lm_head.weight": "output.weight"}
    for i in range(config.n_layers):
        m |= _block_map(f"layers.{i}.", f"layers.{i}.")
    return m


LLAMA = Conventions(
    norm_placement="pre", norm_kind="rms_norm", eps=1e-5, positions="rope",
    rope_layout="interleaved", ffn_kind="gated", gate_activation="silu", embedding_scale="none",
    fully_masked_rows="undefined", float32_steps=("norm_statistics",),
)
NO_BIAS = {"bias": False}
SPACE = ConfigSpace(split_heads=True, max_len=MAX_LEN)

adapter = TorchModuleAdapter("meta-llama", [
    TorchEntry(
        "rms_norm",
        make=lambda config: RMSNorm(config.d_model, eps=1e-5),
        forward=lambda norm, x: norm(x),
        param_map={"weight": "weight"},
        conventions=LLAMA, config=NO_BIAS,
    ),
    TorchEntry(
        "gated_ffn",
        make=lambda config: FeedForward(config.d_model, config.d_ff),
        forward=lambda ffn, x: ffn(x),
        param_map=_ffn_map("", ""),
        conventions=LLAMA, config=NO_BIAS,
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: Holder(Attention(args_of(config)), args_of(config)),
        forward=_fwd_inner, step=_step_inner, derives_positions=True,
        param_map=_attn_map("", "inner."),
        conventions=LLAMA, config=NO_BIAS, supports=SPACE,
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: Holder(TransformerBlock(0, args_of(config)), args_of(config)),
        forward=_fwd_inner, step=_step_inner, derives_positions=True,
        param_map=_block_map("", "inner."),
        conventions=LLAMA, config=NO_BIAS, supports=SPACE,
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: Transformer(args_of(config)),
        forward=_fwd_lm, step=_step_lm, derives_positions=True,
        param_map=_lm_map,
        conventions=LLAMA, config=NO_BIAS,
        supports=ConfigSpace(split_heads=True, max_len=MAX_LEN, tied=False),
    ),
])
