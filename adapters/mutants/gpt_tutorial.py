"""A correct third-party-style decoder-only model (SPEC.md §11), and the adapter glue the
decoder mutants share.

Written the way minimal GPT and Llama repositories write it (nanoGPT, Meta's llama
``model.py``): its own parameter names (``wq``, ``wk``, ``wv``, ``wo``; ``w1`` the gate,
``w3`` the up and ``w2`` the down projection; ``wte``, ``wpe``, ``ln_f``), a KV cache kept as
a tuple ``(k, v)`` per layer and concatenated along the sequence axis, RoPE in the
``rotate_half`` (half-split) layout, keys and values repeated to the query heads with
``repeat_interleave``. A model either rotates (``rope=True``) or adds a learned position
table; its FFN is SwiGLU or GPT-2's GELU MLP; its norm RMSNorm or LayerNorm.

Each piece a mutant may break is its own method, so a mutant overrides exactly one.
``ENTRIES`` join the control adapter ``tck.adapters.mutants.tutorial:adapter``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tck.adapters import Chunk, TorchEntry, Unsupported
from tck.adapters.config_space import parts_without_bias
from tck.reference import DECODER_CANONICAL, Config, Conventions

Cache = tuple[Tensor, Tensor]

# ------------------------------------------------------------------------------ modules


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    """Causal self-attention with n_kv_heads key/value heads, optional RoPE and a KV cache."""

    def __init__(
        self,
        dim: int,
        n_heads: int,
        n_kv_heads: int,
        rope: bool,
        bias: bool = True,
        out_bias: bool | None = None,
    ):
        """``bias``: on wq, wk, wv; ``out_bias``: on wo (default ``bias``), as the book GPT's
        qkv_bias switch leaves the output projection's bias alone (SPEC.md §0.5)."""
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, dim // n_heads
        self.n_rep, self.rope = n_heads // n_kv_heads, rope
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=bias)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=bias)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=bias)
        self.wo = nn.Linear(
            n_heads * self.head_dim, dim, bias=bias if out_bias is None else out_bias
        )
        # float64 and not a buffer, so module.to(dtype) does not round the frequencies (§10.10)
        self.inv_freq = 1.0 / (
            10000.0 ** (torch.arange(0, self.head_dim, 2).double() / self.head_dim)
        )

    def default_positions(self, batch: int, n: int, past: int) -> Tensor:
        return torch.arange(past, past + n).expand(batch, n)

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:  # x (B, H, n, hd)
        inv_freq = self.inv_freq.to(positions.device)
        freqs = positions.double()[:, None, :, None] * inv_freq  # (B, 1, n, hd/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return x * emb.cos().to(x.dtype) + rotate_half(x) * emb.sin().to(x.dtype)

    def rotate_queries(self, q: Tensor, positions: Tensor) -> Tensor:
        return self.rotate(q, positions)

    def rotate_keys(self, k: Tensor, positions: Tensor) -> Tensor:
        return self.rotate(k, positions)

    def repeat_kv(self, x: Tensor) -> Tensor:  # (B, H_kv, T, hd) -> (B, H, T, hd)
        return x.repeat_interleave(self.n_rep, dim=1)

    def scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim)

    def extend_cache(self, cache: Cache | None, k: Tensor, v: Tensor) -> Cache:
        if cache is None:
            return k, v
        return torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)

    def future_mask(self, n: int, t: int, cached: bool) -> Tensor:
        """True where query i (token t - n + i) must not look: keys after it."""
        return torch.ones(n, t, dtype=torch.bool).triu(diagonal=t - n + 1)

    def padding_mask(self, pad_mask: Tensor, n: int) -> Tensor:
        """True where a query must not look because the key is padding: (B, 1, 1, T), from
        ``pad_mask`` (B, T), 1 = token, 0 = padding; ``n`` is the number of queries."""
        return pad_mask[:, None, None, :] == 0

    def weights(self, scores: Tensor) -> Tensor:
        """Softmax over the keys; a left pad sees no key at all (-inf everywhere): zeros."""
        return torch.softmax(scores, dim=-1).nan_to_num(0.0)

    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        pad_mask: Tensor | None = None,  # (B, T): 1 = token, 0 = padding
        cache: Cache | None = None,
    ) -> tuple[Tensor, Cache]:
        b, n, _ = x.shape
        past = 0 if cache is None else cache[0].shape[2]
        if positions is None:
            positions = self.default_positions(b, n, past)
        q, k, v = self.project(x)
        if self.rope:
            q, k = self.rotate_queries(q, positions), self.rotate_keys(k, positions)
        cache = self.extend_cache(cache, k, v)
        k, v = self.repeat_kv(cache[0]), self.repeat_kv(cache[1])
        att = (q @ k.transpose(-2, -1)) * self.scale()  # (B, H, n, T)
        att = self.masked(att, n, past > 0, pad_mask)
        return self.wo(self.merge_heads(self.weights(att) @ v)), cache

    def merge_heads(self, y: Tensor) -> Tensor:
        """(B, H, n, hd) -> (B, n, H * hd)."""
        return y.transpose(1, 2).flatten(2)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q (B, H, n, hd), k and v (B, H_kv, n, hd) from x (B, n, D)."""
        b, n, _ = x.shape
        q = self.wq(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        return q, k, v

    def masked(self, scores: Tensor, n: int, cached: bool, pad_mask: Tensor | None) -> Tensor:
        """The scores (B, H, n, T) with -inf where a query must not look."""
        return scores.masked_fill(self.hidden(n, scores.shape[-1], cached, pad_mask), -torch.inf)

    def hidden(self, n: int, t: int, cached: bool, pad_mask: Tensor | None) -> Tensor:
        """True where a query must not look: a key after it, or (with ``pad_mask``) padding."""
        future = self.future_mask(n, t, cached)
        return future if pad_mask is None else future | self.padding_mask(pad_mask, n)


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int, bias: bool = True):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=bias)  # gate
        self.w3 = nn.Linear(dim, hidden, bias=bias)  # up
        self.w2 = nn.Linear(hidden, dim, bias=bias)  # down
        self.act = F.silu

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.act(self.w1(x)) * self.w3(x))


class MLP(nn.Module):  # GPT-2's
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def normed(self, x: Tensor) -> Tensor:
        """x / rms(x), in float32 for half inputs (as transformers' LlamaRMSNorm computes it;
        mutant rms_norm_low_precision drops that)."""
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.normed(x) * self.weight


class Block(nn.Module):
    rms_norm: type[RMSNorm] = RMSNorm  # the Llama block's norm
    attention: type[Attention] = Attention

    def __init__(self, c: Config, llama: bool):
        super().__init__()
        norm: Callable[[int], nn.Module] = self.rms_norm if llama else nn.LayerNorm
        self.ln_1, self.ln_2 = norm(c.d_model), norm(c.d_model)
        self.attn = self.attention(
            c.d_model,
            c.n_heads,
            c.kv_heads,
            rope=llama,
            bias=c.has_attention_bias,
            out_bias=c.has_attention_out_bias,
        )
        self.mlp = SwiGLU(c.d_model, c.d_ff, c.has_ffn_bias) if llama else MLP(c.d_model, c.d_ff)

    def forward(self, x, positions=None, pad_mask=None, cache=None):
        h, cache = self.attn(self.ln_1(x), positions, pad_mask, cache)
        x = x + h
        return x + self.mlp(self.ln_2(x)), cache


class GPT(nn.Module):
    """GPT-2 style: wte + wpe, pre-LN blocks, ln_f, head tied to wte."""

    block: type[Block] = Block

    def __init__(self, c: Config):
        super().__init__()
        self.wte, self.wpe = (
            nn.Embedding(c.vocab_size, c.d_model),
            nn.Embedding(c.max_len, c.d_model),
        )
        self.h = nn.ModuleList(self.block(c, llama=False) for _ in range(c.n_layers))
        self.ln_f = nn.LayerNorm(c.d_model)

    def positions_from(self, pad_mask: Tensor | None, b: int, n: int, past: int) -> Tensor:
        """Position ids as generate() makes them: counting real tokens only."""
        if pad_mask is None:
            return torch.arange(past, past + n).expand(b, n)
        return (pad_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -n:]

    def forward(self, idx, pad_mask=None, positions=None, caches=None):
        b, n = idx.shape
        past = 0 if caches is None else caches[0][0].shape[2]
        if positions is None:
            positions = self.positions_from(pad_mask, b, n, past)
        x = self.wte(idx) + self.wpe(positions)
        new = []
        for i, block in enumerate(self.h):
            x, cache = block(x, positions, pad_mask, None if caches is None else caches[i])
            new.append(cache)
        return self.logits(self.ln_f(x)), new

    def logits(self, h: Tensor) -> Tensor:
        """The head tied to the token table (§8.3)."""
        return h @ self.wte.weight.T


class Llama(nn.Module):
    """Llama style: tok_embeddings, RMSNorm pre-LN blocks with RoPE and SwiGLU, a final
    RMSNorm, an untied output projection (Meta's llama ``Transformer``)."""

    block: type[Block] = Block
    rms_norm: type[RMSNorm] = RMSNorm

    def __init__(self, c: Config):
        super().__init__()
        self.tok_embeddings = nn.Embedding(c.vocab_size, c.d_model)
        self.layers = nn.ModuleList(self.block(c, llama=True) for _ in range(c.n_layers))
        self.norm = self.rms_norm(c.d_model)
        self.output = nn.Linear(c.d_model, c.vocab_size, bias=False)

    def forward(self, ids, pad_mask=None, positions=None, caches=None):
        x = self.tok_embeddings(ids)
        new = []
        for i, layer in enumerate(self.layers):  # each attention numbers from its own cache
            x, cache = layer(x, positions, pad_mask, None if caches is None else caches[i])
            new.append(cache)
        return self.output(self.norm(x)), new


# ------------------------------------------------------------------------------ adapting


def _linear(ours: str, theirs: str, bias: bool = True) -> dict[str, str]:
    mapping = {f"{ours}weight": f"{theirs}weight"}
    if bias:
        mapping[f"{ours}bias"] = f"{theirs}bias"
    return mapping


def attention_map(
    ours: str, theirs: str, bias: bool = True, out_bias: bool | None = None
) -> dict[str, str]:
    """wq, wk, wv (``bias``) and wo (``out_bias``, default ``bias``)."""
    out: dict[str, str] = {}
    for name in "qkvo":
        has = bias if name != "o" or out_bias is None else out_bias
        out.update(_linear(f"{ours}{name}.", f"{theirs}w{name}.", has))
    return out


LLAMA = dataclasses.replace(
    DECODER_CANONICAL,
    norm_kind="rms_norm",
    eps=1e-6,
    positions="rope",
    rope_layout="half_split",
    ffn_kind="gated",
)


def _check(config: Config) -> None:
    if (
        config.head_dim_k != config.head_dim_v
        or config.head_dim_k * config.n_heads != config.d_model
    ):
        raise Unsupported("the tutorial attention has d_k = d_v = d_model / n_heads")


def _attention_step(m, cache, x, key_padding=None, positions=None):
    out, cache = m(x, positions, key_padding, cache)
    return out, cache


def attention_entry(
    cls: type[Attention] = Attention, *, step=_attention_step, **kw: Any
) -> TorchEntry:
    """causal_self_attention with RoPE (half-split) and grouped-query heads."""

    def make(c: Config) -> nn.Module:
        _check(c)
        return cls(
            c.d_model,
            c.n_heads,
            c.kv_heads,
            rope=True,
            bias=c.has_attention_bias,
            out_bias=c.has_attention_out_bias,
        )

    def forward(m, x, key_padding=None, positions=None):
        return m(x, positions, key_padding)[0]

    return TorchEntry(
        "causal_self_attention",
        make=make,
        forward=forward,
        step=step,
        derives_positions=True,  # default_positions(past): SPEC.md §11.9
        param_map=lambda c: attention_map("", "", c.has_attention_bias, c.has_attention_out_bias),
        conventions=dataclasses.replace(LLAMA, fully_masked_rows="zero"),
        **kw,
    )


def gated_ffn_entry(cls: type[SwiGLU] = SwiGLU, **kw: Any) -> TorchEntry:
    def make(c: Config) -> nn.Module:
        return cls(c.d_model, c.d_ff, c.has_ffn_bias)

    return TorchEntry(
        "gated_ffn",
        make=make,
        forward=lambda m, x: m(x),
        param_map=lambda c: {
            **_linear("gate.", "w1.", c.has_ffn_bias),
            **_linear("up.", "w3.", c.has_ffn_bias),
            **_linear("down.", "w2.", c.has_ffn_bias),
        },
        conventions=LLAMA,
        **kw,
    )


def rms_norm_entry(cls: type[RMSNorm] = RMSNorm, eps: float = 1e-6) -> TorchEntry:
    """rms_norm with Llama's conventions (eps 1e-6); ``eps``: what the module is built with."""

    def make(c: Config) -> nn.Module:
        return cls(c.d_model, eps=eps)

    return TorchEntry(
        "rms_norm",
        make=make,
        forward=lambda m, x: m(x),
        param_map={"weight": "weight"},
        conventions=LLAMA,
    )


def gpt_map(c: Config) -> dict[str, str]:
    mapping = {"embedding.weight": "wte.weight", "pos_embedding.weight": "wpe.weight"}
    mapping |= {"norm.weight": "ln_f.weight", "norm.bias": "ln_f.bias"}
    for i in range(c.n_layers):
        ours, theirs = f"layers.{i}.", f"h.{i}."
        mapping |= attention_map(
            f"{ours}self_attn.", f"{theirs}attn.", c.has_attention_bias, c.has_attention_out_bias
        )
        mapping |= _linear(f"{ours}norm1.", f"{theirs}ln_1.") | _linear(
            f"{ours}norm2.", f"{theirs}ln_2."
        )
        mapping |= _linear(f"{ours}ffn.fc1.", f"{theirs}mlp.c_fc.")
        mapping |= _linear(f"{ours}ffn.fc2.", f"{theirs}mlp.c_proj.")
    return mapping


def _gpt_forward(m, ids, key_padding=None, positions=None):
    return m(ids, key_padding, positions)[0]  # without positions: positions_from(key_padding)


def _gpt_step(m, caches, ids, key_padding=None, positions=None):
    return m(ids, key_padding, positions, caches)


def gpt_entry(
    cls: type[GPT] = GPT,
    *,
    forward=_gpt_forward,
    step=_gpt_step,
    conventions: Conventions | None = None,
    derives_positions: bool | str = "padding",
    param_map: Callable[[Config], dict[str, Any]] = gpt_map,
    **kw: Any,
) -> TorchEntry:
    """causal_lm, GPT-2 style (learned positions, tied head); q, k and v with or without
    bias (the book GPT's qkv_bias), every other bias always there. ``conventions``: the
    declared ones, GPT-2's with zeros for a query that sees no key by default. Given no
    position ids, the model numbers its tokens from the padding mask and the cache
    (``positions_from``: SPEC.md §11.7, §11.9)."""

    def make(c: Config) -> nn.Module:
        _check(c)
        always = ("attention_out", "ffn", "norm")
        if c.kv_heads != c.n_heads or not c.tie_weights or parts_without_bias(c, always):
            raise Unsupported(
                "the tutorial GPT has no grouped-query heads, always biases (but on q, k, v: "
                "qkv_bias), a tied head"
            )
        return cls(c)

    return TorchEntry(
        "causal_lm",
        make=make,
        forward=forward,
        step=step,
        derives_positions=derives_positions,
        param_map=param_map,
        conventions=conventions
        or dataclasses.replace(DECODER_CANONICAL, fully_masked_rows="zero", activation="gelu_tanh"),
        **kw,
    )


def llama_block_map(ours: str, theirs: str, c: Config) -> dict[str, str]:
    mapping = attention_map(f"{ours}self_attn.", f"{theirs}attn.", c.has_attention_bias)
    mapping |= {f"{ours}norm1.weight": f"{theirs}ln_1.weight"}
    mapping |= {f"{ours}norm2.weight": f"{theirs}ln_2.weight"}
    for canonical, name in (("gate.", "w1."), ("up.", "w3."), ("down.", "w2.")):
        mapping |= _linear(f"{ours}ffn.{canonical}", f"{theirs}mlp.{name}", c.has_ffn_bias)
    return mapping


def llama_map(c: Config) -> dict[str, str]:
    mapping = {"embedding.weight": "tok_embeddings.weight", "norm.weight": "norm.weight"}
    mapping |= {"lm_head.weight": "output.weight"}
    for i in range(c.n_layers):
        mapping |= llama_block_map(f"layers.{i}.", f"layers.{i}.", c)
    return mapping


def _llama_step(m, caches, ids, key_padding=None, positions=None):
    return m(ids, key_padding, positions, caches)


def llama_block_entry(cls: type[Block] = Block, **kw: Any) -> TorchEntry:
    """decoder_block, Llama style (RMSNorm, RoPE half-split, SwiGLU), with its KV cache."""

    def make(c: Config) -> nn.Module:
        _check(c)
        return cls(c, llama=True)

    def forward(m, x, key_padding=None, positions=None):
        return m(x, positions, key_padding)[0]

    def step(m, cache, x, key_padding=None, positions=None):
        return m(x, positions, key_padding, cache)

    return TorchEntry(
        "decoder_block",
        name="decoder_block[llama]",
        make=make,
        forward=forward,
        step=step,
        derives_positions=True,  # default_positions(past): SPEC.md §11.9
        param_map=lambda c: llama_block_map("", "", c),
        conventions=dataclasses.replace(LLAMA, fully_masked_rows="zero"),
        **kw,
    )


def llama_entry(cls: type[Llama] = Llama, **kw: Any) -> TorchEntry:
    """causal_lm, Llama style (untied head, no position table), with its KV cache."""

    def make(c: Config) -> nn.Module:
        _check(c)
        if c.tie_weights:
            raise Unsupported("the tutorial Llama has an untied output projection")
        return cls(c)

    def forward(m, ids, key_padding=None, positions=None):
        return m(ids, key_padding, positions)[0]

    return TorchEntry(
        "causal_lm",
        name="causal_lm[llama]",
        make=make,
        forward=forward,
        step=_llama_step,
        derives_positions=True,  # each attention's default_positions(past): SPEC.md §11.9
        param_map=llama_map,
        conventions=dataclasses.replace(LLAMA, fully_masked_rows="zero"),
        config={"tie_weights": False},
        **kw,
    )


class ModuleAttention(nn.Module):
    """Causal self-attention on ``nn.MultiheadAttention`` (learned positions, no RoPE), as
    code built on torch.nn writes it: the causal mask and the key padding in PyTorch's
    polarity (True = may NOT attend), and the rows left with no key (where the module
    returns NaN) zeroed after its output projection."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)

    def padding(self, keep: Tensor) -> Tensor:
        """The key_padding_mask (True = pad) from a keep-mask (True = token)."""
        return ~keep

    def keyless(self, hidden: Tensor) -> Tensor:
        """The query rows with no key left, (B, L), from the hidden keys (B, L, L)."""
        return hidden.all(dim=-1)

    def forward(self, x: Tensor, keep: Tensor | None = None) -> Tensor:
        length = x.shape[1]
        future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        pad = None if keep is None else self.padding(keep)
        y, _ = self.attn(x, x, x, key_padding_mask=pad, attn_mask=future, need_weights=False)
        if pad is None:
            return y
        return y.masked_fill(self.keyless(future[None] | pad[:, None, :])[..., None], 0.0)


def module_attention_entry(cls: type[ModuleAttention] = ModuleAttention) -> TorchEntry:
    """causal_self_attention[nn.MultiheadAttention]: q, k, v the thirds of in_proj."""

    def make(c: Config) -> nn.Module:
        if c.kv_heads != c.n_heads or not (c.has_attention_bias and c.has_attention_out_bias):
            raise Unsupported("nn.MultiheadAttention has equal heads and every projection's bias")
        return cls(c.d_model, c.n_heads)

    def param_map(c: Config) -> dict[str, Any]:
        mapping: dict[str, Any] = {}
        for index, name in enumerate("qkv"):
            mapping[f"{name}.weight"] = Chunk("attn.in_proj_weight", index, 3)
            mapping[f"{name}.bias"] = Chunk("attn.in_proj_bias", index, 3)
        return mapping | _linear("o.", "attn.out_proj.")

    return TorchEntry(
        "causal_self_attention",
        name="causal_self_attention[nn.MultiheadAttention]",
        make=make,
        forward=lambda m, x, key_padding=None: m(x, key_padding),
        param_map=param_map,
        conventions=dataclasses.replace(DECODER_CANONICAL, fully_masked_rows="zero"),
    )


ENTRIES: list[TorchEntry] = [
    attention_entry(),
    module_attention_entry(),
    gated_ffn_entry(),
    gpt_entry(),
    rms_norm_entry(),
    llama_block_entry(),
    llama_entry(),
]
