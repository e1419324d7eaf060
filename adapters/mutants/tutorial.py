"""A correct third-party-style Transformer, and the adapter glue every mutant shares.

The modules are written the way blog posts and course notebooks write them (after
jadore801120/attention-is-all-you-need-pytorch and harvardnlp/annotated-transformer): their
own parameter names (``w_q``, ``fc``, ``gamma``, ``w_1``), 0/1 masks filled with ``mask == 0``,
a causal flag that builds its own look-ahead mask, dropout modules that are the identity in
eval mode. Each mutant copies one of them and breaks exactly one thing.

``adapter`` (``tck.adapters.mutants.tutorial:adapter``) runs these modules unbroken: the
control that proves a mutant's failures come from its bug, not from the tutorial style.
The ``*_entry`` helpers adapt a module class like any third-party model: a ``forward`` that
turns the suite's boolean keep-masks into the module's masks, and a canonical -> module
parameter map.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tck.adapters import TorchEntry, TorchModuleAdapter, Unsupported
from tck.adapters.config_space import parts_without_bias
from tck.reference import Config, Conventions

# ------------------------------------------------------------------------------ modules


class ScaledDotProductAttention(nn.Module):
    """softmax(q k^T / temperature) v. ``mask``: 1 = may attend, 0 = masked; ``causal``: a
    query may not attend later keys."""

    def __init__(self, temperature: float, dropout: float = 0.1):
        super().__init__()
        self.temperature = temperature
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1) / self.temperature  # (B, H, Lq, Lk)
        if causal:
            lq, lk = attn.shape[-2:]
            future = torch.ones(lq, lk, dtype=torch.bool, device=attn.device).triu(1)
            attn = attn.masked_fill(future, float("-inf"))
        if mask is not None:
            attn = attn.masked_fill(mask == 0, float("-inf"))
        return self.dropout(self.weights(attn)) @ v

    def weights(self, scores: Tensor) -> Tensor:
        """Softmax over the keys; a query with no key (-inf everywhere): zeros."""
        return torch.softmax(scores, dim=-1).nan_to_num(0.0)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with d_k = d_v = d_model / n_heads. ``mask``: (B, Lq or 1, Lk)."""

    attention_class: type[ScaledDotProductAttention] = ScaledDotProductAttention

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.1):
        super().__init__()
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.fc = nn.Linear(d_model, d_model)
        self.attention = self.attention_class(temperature=self.d_k**0.5, dropout=dropout)

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        q, k, v = (self.split_heads(t) for t in self.project(q, k, v))  # (B, H, L, d_k)
        if mask is not None:
            mask = mask.unsqueeze(1)  # the same mask for every head
        x = self.attention(q, k, v, mask, causal)  # (B, H, Lq, d_k)
        return self.output(self.merge_heads(x))

    # One method a step, so that a mutant replaces the one line its bug is in.
    def project(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The three input projections, each (B, L, d_model)."""
        return self.w_q(q), self.w_k(k), self.w_v(v)

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, L, d_model) -> (B, H, L, d_k): head i reads features [i*d_k, (i+1)*d_k)."""
        b, length = x.shape[:2]
        return x.view(b, length, self.n_heads, self.d_k).transpose(1, 2)

    def merge_heads(self, x: Tensor) -> Tensor:
        """(B, H, L, d_k) -> (B, L, d_model), the inverse of ``split_heads``."""
        return x.transpose(1, 2).flatten(2)

    def output(self, x: Tensor) -> Tensor:
        """The output projection W_o."""
        return self.fc(x)


class LayerNorm(nn.Module):
    """gamma * (x - mean) / sqrt(var + eps) + beta over the last axis."""

    def __init__(self, features: int, eps: float = 1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(features))
        self.beta = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        # statistics in float32 for half inputs, as torch.nn.LayerNorm's kernel keeps them
        # (mutant layer_norm_low_precision drops this)
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        mean = xf.mean(-1, keepdim=True)
        var = xf.var(-1, keepdim=True, unbiased=False)
        y = ((xf - mean) / torch.sqrt(var + self.eps)).to(x.dtype)
        return self.gamma * y + self.beta


class ScaleNorm(nn.Module):
    """g * x / max(||x||, eps): one learned scalar g, started at sqrt(d) (Nguyen & Salazar
    2019, "Transformers without Tears"), the norm clamped from below."""

    def __init__(self, features: int, eps: float = 1e-5):
        super().__init__()
        self.g = nn.Parameter(torch.tensor(math.sqrt(features)))
        self.eps = eps

    def norm(self, x: Tensor) -> Tensor:
        return torch.norm(x, dim=-1, keepdim=True).clamp(min=self.eps)

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x  # as LayerNorm
        return (xf / self.norm(xf)).to(x.dtype) * self.g


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu}


class PositionwiseFeedForward(nn.Module):
    """w_2(act(w_1(x))) at every position."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1, activation: str = "relu"):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.activation = ACTIVATIONS[activation]
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


class EncoderLayer(nn.Module):
    """Self-attention and feed-forward sublayers, each Norm(x + Dropout(f(x))) (post-LN), or
    x + Dropout(f(Norm(x))) with ``norm_first``. ``pad_mask``: (B, L), 1 = a real token;
    ``attn_mask``: (L, L), 1 = may attend."""

    attention_class: type[MultiHeadAttention] = MultiHeadAttention
    norm_class: type[LayerNorm] = LayerNorm

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        eps: float = 1e-5,
        norm_first: bool = False,
    ):
        super().__init__()
        self.self_attn = self.attention_class(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1 = self.norm_class(d_model, eps)
        self.norm2 = self.norm_class(d_model, eps)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    @staticmethod
    def make_mask(pad_mask: Tensor | None, attn_mask: Tensor | None) -> Tensor | None:
        """(B, 1, L): padded keys hidden from every query, AND the (L, L) attention mask."""
        mask = None if pad_mask is None else pad_mask.unsqueeze(-2)
        if attn_mask is not None:
            mask = attn_mask.unsqueeze(0) if mask is None else mask & attn_mask
        return mask

    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        mask = self.make_mask(pad_mask, attn_mask)
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, mask, causal))
            return x + self.dropout(self.feed_forward(self.norm2(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask, causal)))
        return self.norm2(x + self.dropout(self.feed_forward(x)))


class Encoder(nn.Module):
    """A stack of pre-LN encoder layers followed by the final LayerNorm (GPT-2, ViT)."""

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, eps: float = 1e-5):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, eps=eps, norm_first=True) for _ in range(n_layers)
        )
        self.norm = LayerNorm(d_model, eps)

    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        for layer in self.layers:
            x = layer(x, pad_mask, attn_mask, causal)
        return self.norm(x)


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table to x: pe[pos, 2i] = sin(pos / 10000^(2i/d)), pe[pos, 2i+1]
    = cos(...). The table is computed once, in double precision, for max_len positions."""

    def __init__(self, d_model: int, max_len: int = 5000):
        super().__init__()
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        position = torch.arange(0, max_len, dtype=torch.float64).unsqueeze(1)
        div_term = torch.exp(
            torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model)
        )
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))  # (1, max_len, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.pe[:, : x.size(1)]


class RotaryEmbedding(nn.Module):
    """RoPE as in GPT-J (``rotate_every_two``): pairs (x[2i], x[2i+1]) are rotated by
    pos * base^(-2i/d)."""

    def __init__(self, dim: int, base: float = 10000.0):
        super().__init__()
        # A plain attribute, not a buffer: module.half() or .to(torch.bfloat16) converts
        # buffers, and positions and frequencies rounded to 16 bits turn the angles of long
        # positions by radians (huggingface/transformers#29285; mutant rope_low_precision).
        self.inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        freqs = positions.to(self.inv_freq.dtype)[:, None] * self.inv_freq  # (L, d/2)
        cos, sin = freqs.cos().repeat_interleave(2, -1), freqs.sin().repeat_interleave(2, -1)
        rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
        return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


# ------------------------------------------------------------------ adapting the modules


def heads(config: Config) -> tuple[int, int]:
    """(d_model, n_heads), refusing what d_k = d_v = d_model / n_heads cannot express."""
    d, h = config.d_model, config.n_heads
    if config.head_dim_k != config.head_dim_v or config.head_dim_k * h != d:
        raise Unsupported(
            f"this multi-head attention has d_k = d_v = d_model / n_heads: it cannot express "
            f"d_k={config.head_dim_k}, d_v={config.head_dim_v} with d_model={d}, n_heads={h}"
        )
    if parts_without_bias(config):
        raise Unsupported("this implementation always has biases (SPEC.md §0.5)")
    return d, h


def linear_map(ours: str, theirs: str) -> dict[str, str]:
    return {f"{ours}weight": f"{theirs}weight", f"{ours}bias": f"{theirs}bias"}


def mha_map(ours: str = "", theirs: str = "") -> dict[str, str]:
    names = {"q": "w_q", "k": "w_k", "v": "w_v", "o": "fc"}
    out: dict[str, str] = {}
    for canonical, own in names.items():
        out.update(linear_map(f"{ours}{canonical}.", f"{theirs}{own}."))
    return out


def norm_map(ours: str = "", theirs: str = "") -> dict[str, str]:
    return {f"{ours}weight": f"{theirs}gamma", f"{ours}bias": f"{theirs}beta"}


def ffn_map(ours: str = "", theirs: str = "") -> dict[str, str]:
    return {
        **linear_map(f"{ours}fc1.", f"{theirs}w_1."),
        **linear_map(f"{ours}fc2.", f"{theirs}w_2."),
    }


def layer_map(ours: str = "", theirs: str = "") -> dict[str, str]:
    return {
        **mha_map(f"{ours}self_attn.", f"{theirs}self_attn."),
        **norm_map(f"{ours}norm1.", f"{theirs}norm1."),
        **ffn_map(f"{ours}ffn.", f"{theirs}feed_forward."),
        **norm_map(f"{ours}norm2.", f"{theirs}norm2."),
    }


def stack_map(config: Config) -> dict[str, str]:
    out = norm_map("norm.", "norm.")
    for i in range(config.n_layers):
        out.update(layer_map(f"layers.{i}.", f"layers.{i}."))
    return out


def blog_mask(key_padding: Tensor | None, attn_mask: Tensor | None) -> Tensor | None:
    """The suite's keep-masks (True = may attend) as the 0/1 mask (B or 1, Lq or 1, Lk)."""
    mask = None if key_padding is None else key_padding[:, None, :]
    if attn_mask is not None:
        mask = attn_mask[None] if mask is None else mask & attn_mask
    return None if mask is None else mask.long()


Module = type[nn.Module]


def attention_entry(cls: Module = ScaledDotProductAttention, **kw: Any) -> TorchEntry:
    def make(c: Config) -> nn.Module:
        return cls(temperature=c.head_dim_k**0.5)

    def forward(
        m: nn.Module,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        keep_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        return m(q, k, v, None if keep_mask is None else keep_mask.long(), causal)

    return TorchEntry("attention", make=make, forward=forward, **kw)


def mha_entry(cls: Module = MultiHeadAttention, **kw: Any) -> TorchEntry:
    def make(c: Config) -> nn.Module:
        return cls(*heads(c))

    def forward(
        m: nn.Module,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        return m(query, key, value, blog_mask(key_padding, attn_mask), causal)

    return TorchEntry("mha", make=make, forward=forward, param_map=mha_map(), **kw)


def _call(m: nn.Module, x: Tensor) -> Tensor:
    return m(x)


def layer_norm_entry(cls: Module = LayerNorm, **kw: Any) -> TorchEntry:
    def make(c: Config) -> nn.Module:
        return cls(c.d_model, eps=1e-5)

    return TorchEntry("layer_norm", make=make, forward=_call, param_map=norm_map(), **kw)


def scale_norm_entry(cls: Module = ScaleNorm, **kw: Any) -> TorchEntry:
    def make(c: Config) -> nn.Module:
        return cls(c.d_model, eps=1e-5)

    # g is 0-d, the canonical gain [1] (SPEC.md §5.4): a plain name reshapes across the
    # singleton
    return TorchEntry("scale_norm", make=make, forward=_call, param_map={"weight": "g"}, **kw)


def ffn_entry(
    cls: Module = PositionwiseFeedForward, activation: str = "relu", **kw: Any
) -> TorchEntry:
    def make(c: Config) -> nn.Module:
        return cls(c.d_model, c.d_ff, activation=activation)

    kw.setdefault("conventions", Conventions(activation=activation))  # type: ignore[arg-type]
    return TorchEntry("ffn", make=make, forward=_call, param_map=ffn_map(), **kw)


def _self_attention(
    m: nn.Module,
    x: Tensor,
    key_padding: Tensor | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    return m(x, None if key_padding is None else key_padding.long(), attn_mask, causal)


def encoder_layer_entry(
    cls: Module = EncoderLayer, norm_first: bool = False, **kw: Any
) -> TorchEntry:
    def make(c: Config) -> nn.Module:
        return cls(*heads(c), c.d_ff, norm_first=norm_first)

    kw.setdefault("conventions", Conventions(norm_placement="pre" if norm_first else "post"))
    return TorchEntry(
        "encoder_layer", make=make, forward=_self_attention, param_map=layer_map(), **kw
    )


def encoder_entry(cls: Module = Encoder, **kw: Any) -> TorchEntry:
    def make(c: Config) -> nn.Module:
        d, h = heads(c)
        return cls(c.n_layers, d, h, c.d_ff)

    kw.setdefault("conventions", Conventions(norm_placement="pre"))
    return TorchEntry("encoder", make=make, forward=_self_attention, param_map=stack_map, **kw)


def pe_entry(cls: Module = PositionalEncoding, **kw: Any) -> TorchEntry:
    def make(c: Config) -> nn.Module:
        return cls(c.d_model, max_len=c.max_len)

    def forward(m: nn.Module, positions: Tensor) -> Tensor:  # the table: what it adds to zeros
        zeros = torch.zeros(1, int(positions.max()) + 1, m.pe.shape[-1], dtype=m.pe.dtype)
        return m(zeros)[0, positions]

    return TorchEntry("sinusoidal_pe", make=make, forward=forward, **kw)


def rope_entry(cls: Module = RotaryEmbedding, **kw: Any) -> TorchEntry:
    def make(c: Config) -> nn.Module:
        return cls(c.head_dim_k)

    def forward(m: nn.Module, x: Tensor, positions: Tensor) -> Tensor:
        return m(x, positions)

    return TorchEntry("rope", make=make, forward=forward, **kw)


def vit_entry(make: Callable[[Config], nn.Module], **kw: Any) -> TorchEntry:
    """A ViT with the reference's canonical parameter names (``tck.reference.model.ViT``)."""

    def forward(m: nn.Module, images: Tensor) -> Tensor:
        return m(images)

    return TorchEntry("vit", make=make, forward=forward, **kw)


def seq2seq_entry(make: Callable[[Config], nn.Module], **kw: Any) -> TorchEntry:
    """A seq2seq model with the reference's canonical parameter names."""

    def forward(m: nn.Module, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        return m(src_ids, tgt_ids)

    return TorchEntry("seq2seq", make=make, forward=forward, **kw)


def mutant(name: str, *entries: TorchEntry) -> TorchModuleAdapter:
    """A mutant's adapter: named after its bug class, like a built-in ``mutants.<name>``."""
    return TorchModuleAdapter(f"mutants.{name}", list(entries))


def decoder_entries() -> list[TorchEntry]:
    """The decoder-only control (SPEC.md §11): the unbroken modules of ``gpt_tutorial``."""
    from .gpt_tutorial import ENTRIES

    return list(ENTRIES)


adapter = TorchModuleAdapter(
    "mutants.tutorial",
    [
        attention_entry(),
        mha_entry(),
        layer_norm_entry(),
        scale_norm_entry(),
        ffn_entry(),
        ffn_entry(activation="gelu", name="ffn[gelu]"),
        encoder_layer_entry(),
        encoder_layer_entry(norm_first=True, name="encoder_layer[pre]"),
        encoder_entry(),
        pe_entry(),
        rope_entry(),
        *decoder_entries(),
    ],
)
