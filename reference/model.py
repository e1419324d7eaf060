"""A minimal PyTorch Transformer and ViT: the spec's second, independent implementation.

In the spirit of nanoGPT's ``model.py``: one file, each ``nn.Module`` one idea, in reading
order, shapes in comments where they change. Every forward has exactly one code path, the
spec's. Parameter names are the canonical ones of ``params.param_shapes``, so exporting and
importing canonical parameters is name matching (``canonical_params``, ``load_canonical``).

Run it in float64 (``build`` does) and it agrees with the numpy oracle to ~1e-12 and gives
float64 autograd gradients. It does not import the oracle: the two check each other.

Keep-masks are boolean, True = may attend, and broadcast to the scores ``(B, H, Lq, Lk)``;
a ``(B, Lk)`` key-padding mask is passed as ``(B, 1, 1, Lk)`` (``key_padding``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .components import record
from .conventions import Config, Conventions
from .params import has_final_norm

# ----------------------------------------------------------------------- half precision

# SPEC.md §10.10: what a careful half-precision implementation keeps in float32. The model
# below is that careful implementation: for float16 and bfloat16 tensors it forms the norm
# statistics and the softmax in float32 and the RoPE angles in float64, and rounds each
# result to the tensor's dtype once. ``computed_in_input_dtype`` switches quantities back to
# the naive computation in the input dtype: the hypotheses the suite tests a failure against
# (``numerics.norm_statistics_low_precision``, ...), and the bound of a subject that declares
# ``half_precision="input_dtype"``.
QUANTITIES = ("norm_statistics", "softmax", "rope_angles")
_HALF = (torch.float16, torch.bfloat16)
# A module global, not a ContextVar: torch.compile(fullgraph=True) cannot trace
# ContextVar.get, and the suite runs one check at a time per process.
_IN_INPUT_DTYPE: frozenset[str] = frozenset()


# SPEC.md §10.12: quantities a float64 run forms in a lower dtype and rounds back once: in
# float32, as a float64 build with float32 islands does (Llama's RMSNorm of ``x.float()``, its
# float32 RoPE angles, an eager softmax in float32), the yardstick such a subject is held to
# (``tck.conformance.toolkit.careful.island_careful``); in float16 or bfloat16, the hypothesis
# of a step pinned to 16 bits whatever the build's dtype (``softmax(..., dtype=torch.float16)``;
# ``tck.conformance.diagnosis.islands``).
_IN_FLOAT32: frozenset[str] = frozenset()
_ISLAND_DTYPE: torch.dtype = torch.float32


@contextlib.contextmanager
def _switched(switch: str, quantities: tuple[str, ...]) -> Iterator[None]:
    """Within the block, the module global ``switch`` (``_IN_INPUT_DTYPE`` or
    ``_IN_FLOAT32``) holds ``quantities``; its value before comes back after."""
    unknown = set(quantities) - set(QUANTITIES)
    if unknown:
        raise ValueError(f"unknown quantities {sorted(unknown)}: choose from {QUANTITIES}")
    before = globals()[switch]
    globals()[switch] = frozenset(quantities)
    try:
        yield
    finally:
        globals()[switch] = before


def computed_in_input_dtype(*quantities: str) -> contextlib.AbstractContextManager[None]:
    """Within the block, the model forms ``quantities`` (of ``QUANTITIES``) in the input
    dtype, as a naive implementation does, instead of in float32 (SPEC.md §10.10)."""
    return _switched("_IN_INPUT_DTYPE", quantities)


def computed_in_float32(*quantities: str) -> contextlib.AbstractContextManager[None]:
    """Within the block, the model forms ``quantities`` (of ``QUANTITIES``) of float64
    tensors in float32 and rounds each result back to float64 once (SPEC.md §10.12)."""
    return computed_in("float32", *quantities)


@contextlib.contextmanager
def computed_in(dtype: str, *quantities: str) -> Iterator[None]:
    """Within the block, the model forms ``quantities`` (of ``QUANTITIES``) of float64 tensors
    in ``dtype`` ('float32', 'float16' or 'bfloat16') and rounds each result back to float64
    once (SPEC.md §10.12; a 16-bit step in a float64 build is a bug, §10.10)."""
    global _ISLAND_DTYPE
    if dtype not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"unknown island dtype {dtype!r}: 'float32', 'float16' or 'bfloat16'")
    before = _ISLAND_DTYPE
    _ISLAND_DTYPE = getattr(torch, dtype)
    try:
        with _switched("_IN_FLOAT32", quantities):
            yield
    finally:
        _ISLAND_DTYPE = before


def _careful(x: Tensor, quantity: str) -> bool:
    """Is ``quantity`` of a half-precision ``x`` to be formed in float32 (§10.10)?"""
    return x.dtype in _HALF and quantity not in _IN_INPUT_DTYPE


def _island(x: Tensor, quantity: str) -> bool:
    """Is ``quantity`` of a float64 ``x`` to be formed in ``_ISLAND_DTYPE`` (§10.12)?"""
    return x.dtype == torch.float64 and quantity in _IN_FLOAT32


def _working(x: Tensor, quantity: str) -> Tensor:
    if _careful(x, quantity):
        return x.float()
    return x.to(_ISLAND_DTYPE) if _island(x, quantity) else x


# A matrix product of 16-bit tensors is formed in float32 and rounded to their dtype once:
# what a 16-bit GEMM with a float32 accumulator computes (cuBLAS's, and the CPU's own, which
# is slow on CPUs without 16-bit vector instructions: at 1024 x 768 x 2304 on an AVX2 CPU,
# 3.2 s with a row-major right operand (``weights @ v``), 0.16 s with a transposed one
# (nn.Linear's), against 0.03 s in float32). Measured on that CPU, the two agree on 99.75%
# of the entries and differ by one rounding (the order of the sums) elsewhere.


def _emulated(x: Tensor) -> bool:
    return x.dtype in _HALF and x.device.type == "cpu"


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b``; 16-bit tensors on the CPU in float32, rounded once (above)."""
    return (a.float() @ b.float()).to(a.dtype) if _emulated(a) else a @ b


class Linear(nn.Linear):
    """``nn.Linear`` whose 16-bit product on the CPU is formed in float32 (``matmul``)."""

    def forward(self, x: Tensor) -> Tensor:
        if not _emulated(x):
            return super().forward(x)
        bias = None if self.bias is None else self.bias.float()
        return F.linear(x.float(), self.weight.float(), bias).to(x.dtype)


# ----------------------------------------------------------------------- functional pieces


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    keep_mask: Tensor | None = None,
    scale: float | None = None,
    fully_masked_rows: str = "zero",
) -> Tensor:
    """§3.1: softmax(Q K^T * scale) V, scale = 1/sqrt(d_k); §4.1 keep-masks; §4.4 empty rows.

    q (..., Lq, d_k), k (..., Lk, d_k), v (..., Lk, d_v) -> (..., Lq, d_v). A query row with
    no key kept gets weights 0 ('zero'), NaN ('nan', 'undefined') or 1/Lk ('uniform').
    """
    if fully_masked_rows not in ("zero", "nan", "uniform", "undefined"):
        raise ValueError(
            f"unknown fully_masked_rows policy {fully_masked_rows!r}: "
            "'zero', 'nan', 'uniform' or 'undefined' (SPEC.md §4.4)"
        )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"attention shapes do not fit: q {tuple(q.shape)}, k {tuple(k.shape)}, "
            f"v {tuple(v.shape)} (need q[-1] == k[-1] and k[-2] == v[-2])"
        )
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = matmul(q, k.transpose(-2, -1)) * scale  # (..., Lq, Lk)
    if keep_mask is None:
        keep_mask = torch.ones(1, 1, dtype=torch.bool, device=scores.device)  # keep every key
    check_keep_mask(keep_mask, scores.shape)
    scores = scores.masked_fill(~keep_mask, float("-inf"))
    if scores.dtype in _HALF and not _careful(scores, "softmax"):
        exp = scores.exp()  # the naive softmax in the input dtype (§10.10's hypothesis)
        weights = exp / exp.sum(dim=-1, keepdim=True)
    else:  # §10.10: max and sum in float32 for half inputs, one rounding of the weights
        weights = torch.softmax(_working(scores, "softmax"), dim=-1).to(scores.dtype)
    # weights (..., Lq, Lk), NaN on a row with no key kept
    empty_row = ~keep_mask.any(dim=-1, keepdim=True)  # (..., Lq, 1)
    empty_row_weight = {
        "zero": 0.0,
        "nan": math.nan,
        "undefined": math.nan,
        "uniform": 1.0 / k.shape[-2],
    }[fully_masked_rows]
    weights = torch.where(empty_row, empty_row_weight, weights)
    return matmul(weights, v)  # (..., Lq, d_v)


def check_keep_mask(keep_mask: Tensor, scores_shape: tuple[int, ...] | torch.Size) -> None:
    """§4.1: a boolean keep-mask, (Lq, Lk) or of the scores' rank, broadcasting to them."""
    if not isinstance(keep_mask, Tensor) or keep_mask.dtype != torch.bool:
        dtype = keep_mask.dtype if isinstance(keep_mask, Tensor) else type(keep_mask).__name__
        raise ValueError(
            f"keep-masks are boolean tensors (True = may attend), got {dtype} (SPEC.md §4.1); "
            "an additive float mask is not a keep-mask: use mask == 0 for a 0/-inf mask"
        )
    scores_shape = tuple(scores_shape)
    if keep_mask.dim() not in (2, len(scores_shape)):
        raise ValueError(
            f"keep-mask of shape {tuple(keep_mask.shape)} is ambiguous for scores "
            f"{scores_shape}: give (Lq, Lk) or a mask of the scores' rank "
            "(a (B, Lk) key-padding mask goes in as key_padding(keep), i.e. (B, 1, 1, Lk))"
        )
    # broadcasts to the scores (and not past them): each of its sizes, aligned from the right,
    # is 1 or the scores' (plain ints: torch.broadcast_shapes cost more than the attention)
    aligned = zip(reversed(tuple(keep_mask.shape)), reversed(scores_shape), strict=False)
    fits = all(m in (1, n) for m, n in aligned)
    if not fits:
        raise ValueError(
            f"keep-mask of shape {tuple(keep_mask.shape)} does not broadcast to the attention "
            f"scores {scores_shape} (SPEC.md §4.1)"
        )


def key_padding(keep: Tensor) -> Tensor:
    """§4.2: a (B, Lk) key-padding keep-mask as (B, 1, 1, Lk): the same keys for every query."""
    if keep.dtype != torch.bool or keep.dim() != 2:
        raise ValueError(
            f"a key-padding keep-mask is boolean (B, Lk), got {keep.dtype} {tuple(keep.shape)}"
        )
    return keep[:, None, None, :]


def causal_keep_mask(
    lq: int,
    lk: int,
    alignment: str = "top_left",
    device: torch.device | None = None,
    window: int | None = None,
) -> Tensor:
    """§4.3: query i may attend key j iff j <= i + offset (0 top-left, Lk - Lq bottom-right);
    §4.5: with a sliding ``window`` w, also j > i + offset - w."""
    if alignment not in ("top_left", "bottom_right"):
        raise ValueError(f"unknown causal alignment {alignment!r}: 'top_left' or 'bottom_right'")
    offset = 0 if alignment == "top_left" else lk - lq
    i = torch.arange(lq, device=device)[:, None] + offset  # (Lq, 1): index among the keys
    j = torch.arange(lk, device=device)[None, :]  # (1, Lk)
    if window is None:
        return j <= i  # (Lq, Lk)
    return (j <= i) & (j > i - window)  # (Lq, Lk): the last `window` keys


def _frequencies(d: int, base: float, what: str) -> Tensor:
    """w_i = base^(-2i/d) for i = 0 .. d/2 - 1 (§2.1, §2.3)."""
    if d % 2:
        raise ValueError(f"{what} needs an even width, got d={d} (SPEC.md §10.6)")
    return base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)


def sinusoidal_pe(
    length: int,
    d: int,
    base: float = 10000.0,
    layout: str = "interleaved",
    max_len: int | None = None,
) -> Tensor:
    """§2.1: PE[pos, 2i] = sin(pos w_i), PE[pos, 2i+1] = cos(pos w_i); float64 (L, d).

    ``concatenated`` puts all sines first, then all cosines (same frequencies).
    """
    if max_len is not None and length > max_len:
        raise ValueError(
            f"sequence length {length} exceeds the declared max_len={max_len} (SPEC.md §2.2): "
            "truncate the input or build with a larger Config.max_len"
        )
    if layout not in ("interleaved", "concatenated"):
        raise ValueError(f"unknown PE layout {layout!r}: 'interleaved' or 'concatenated'")
    pos = torch.arange(length, dtype=torch.float64)[:, None]  # (L, 1)
    angles = pos * _frequencies(d, base, "sinusoidal PE")  # (L, d/2)
    if layout == "interleaved":
        return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # (L, d)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)  # (L, d)


def scaled_frequencies(d: int, conventions: Conventions) -> Tensor:
    """§2.6: base^(-2i/d) (§2.3), scaled as declared: linear divides every frequency by the
    factor; llama3 divides the long wavelengths (2 pi / w > L / low_freq_factor, L the
    original context) by it, keeps the short ones (< L / high_freq_factor) and blends between
    by s = (L / wavelength - low) / (high - low)."""
    omega = _frequencies(d, conventions.pe_base, "RoPE")  # (d/2,) float64
    factor = conventions.rope_scaling_factor
    if conventions.rope_scaling == "none":
        return omega
    if conventions.rope_scaling == "linear":
        return omega / factor
    low, high = conventions.rope_low_freq_factor, conventions.rope_high_freq_factor
    context = conventions.rope_original_max_positions
    wavelength = 2 * math.pi / omega
    s = ((context / wavelength - low) / (high - low)).clamp(0.0, 1.0)  # 0: long, 1: short
    return (1 - s) * omega / factor + s * omega


def rope(
    x: Tensor,
    positions: Tensor | None = None,
    base: float = 10000.0,
    layout: str = "interleaved",
    frequencies: Tensor | None = None,
) -> Tensor:
    """§2.3: rotate each pair of x (..., L, d) by theta = pos * base^(-2i/d).

    ``interleaved`` pairs (x[2i], x[2i+1]); ``half_split`` pairs (x[i], x[i + d/2]).
    ``frequencies`` (d/2,) replaces base^(-2i/d) (§2.6's scaled ones).
    """
    if layout not in ("interleaved", "half_split"):
        raise ValueError(f"unknown RoPE layout {layout!r}: 'interleaved' or 'half_split'")
    length, d = x.shape[-2], x.shape[-1]
    positions = torch.arange(length) if positions is None else torch.as_tensor(positions)
    if tuple(positions.shape) != (length,):
        raise ValueError(f"positions must have shape ({length},), got {tuple(positions.shape)}")
    if frequencies is None:
        frequencies = _frequencies(d, base, "RoPE")
    omega = frequencies.to(x.device)  # (d/2,)
    if x.dtype in _HALF and not _careful(x, "rope_angles"):  # §10.10's hypothesis: 16-bit angles
        omega = omega.to(x.dtype)
        theta = positions.to(device=x.device, dtype=x.dtype)[:, None] * omega
    elif _island(x, "rope_angles"):  # §10.12: angles, cos and sin in float32 (or 16 bits)
        theta = positions.to(device=x.device, dtype=_ISLAND_DTYPE)[:, None] * omega.to(
            _ISLAND_DTYPE
        )
    else:  # §10.10: the angle pos * w formed in float64, rounded once as cos and sin
        theta = positions.to(device=x.device, dtype=torch.float64)[:, None] * omega  # (L, d/2)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    if layout == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]  # (..., L, d/2) each
    else:
        a, b = x[..., : d // 2], x[..., d // 2 :]
    ra, rb = a * cos - b * sin, a * sin + b * cos  # (..., L, d/2) each
    if layout == "interleaved":
        return torch.stack([ra, rb], dim=-1).flatten(-2)  # (..., L, d)
    return torch.cat([ra, rb], dim=-1)  # (..., L, d)


def embedding_scale(d_model: int, conventions: Conventions) -> tuple[float, float]:
    """§1.2: (factor on the embeddings, factor on the output logits)."""
    return {
        "emb": (math.sqrt(d_model), 1.0),  # the paper: embeddings x sqrt(d_model)
        "prj": (1.0, 1.0 / math.sqrt(d_model)),  # Mesh-TF/T5: decoder output x d^-1/2
        "none": (1.0, 1.0),
    }[conventions.embedding_scale]


# ------------------------------------------------------------------------------ modules


class Embedding(nn.Module):
    """§1.1: x = E[id]; §1.3: the padding row starts at zero and receives no gradient."""

    def __init__(self, vocab_size: int, d_model: int, padding_idx: int | None = None):
        super().__init__()
        self.padding_idx = padding_idx
        self.weight = nn.Parameter(torch.randn(vocab_size, d_model) / math.sqrt(d_model))
        if padding_idx is not None:
            with torch.no_grad():
                self.weight[padding_idx] = 0.0

    def forward(self, ids: Tensor) -> Tensor:
        vocab = self.weight.shape[0]
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise ValueError(f"token ids must be integers, got dtype {ids.dtype}")
        bad = (ids < 0) | (ids >= vocab)
        # a check on values cannot be traced into a graph (torch.export, ONNX): eager only
        if not torch.compiler.is_compiling() and bad.any():
            raise ValueError(
                f"token id {int(ids[bad][0])} is outside the vocabulary [0, {vocab}) "
                f"(SPEC.md §1.1): {int(bad.sum())} id(s) out of range; enlarge vocab_size or "
                "map unknown tokens to [UNK]"
            )
        return F.embedding(ids, self.weight, padding_idx=self.padding_idx)  # (..., D)


class LayerNorm(nn.Module):
    """§5.1: (x - mean) / sqrt(var + eps) * weight + bias; §5.2: std + eps, var over d - 1."""

    def __init__(
        self,
        d: int,
        eps: float = 1e-5,
        eps_placement: str = "inside_sqrt",
        variance: str = "biased",
        bias: bool = True,
    ):
        super().__init__()
        if eps_placement not in ("inside_sqrt", "outside_sqrt"):
            raise ValueError(f"unknown eps placement {eps_placement!r}")
        if variance not in ("biased", "unbiased"):
            raise ValueError(f"unknown variance {variance!r}: 'biased' or 'unbiased'")
        self.eps, self.eps_placement, self.variance = eps, eps_placement, variance
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        d, xs = x.shape[-1], _working(x, "norm_statistics")  # §10.10: float32 for half x
        centred = xs - xs.mean(dim=-1, keepdim=True)
        divisor = d if self.variance == "biased" else d - 1
        var = (centred**2).sum(dim=-1, keepdim=True) / divisor  # (..., 1)
        if self.eps_placement == "inside_sqrt":
            y = centred / torch.sqrt(var + self.eps)
        else:
            y = centred / (torch.sqrt(var) + self.eps)
        y = y.to(x.dtype) * self.weight
        return y if self.bias is None else y + self.bias


class RMSNorm(nn.Module):
    """§5.3: x / sqrt(mean(x^2) + eps) * weight (no centring, no bias)."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: Tensor) -> Tensor:
        xs = _working(x, "norm_statistics")  # §10.10: the mean square in float32 for half x
        y = xs / torch.sqrt((xs**2).mean(dim=-1, keepdim=True) + self.eps)
        return y.to(x.dtype) * self.weight


class ScaleNorm(nn.Module):
    """§5.4: g * x / max(||x||, eps), one learned scalar gain (Nguyen & Salazar 2019, which
    starts g at sqrt(d); the suite loads its own values)."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.full((1,), math.sqrt(d)))  # g, shape [1]

    def forward(self, x: Tensor) -> Tensor:
        xs = _working(x, "norm_statistics")  # §10.10: the sum of squares in float32 for half x
        # max(||x||, eps) as sqrt(max(sum x^2, eps^2)): the same number, a finite gradient at
        # a zero row, and in a half dtype the square overflows as a naive one does
        norm = torch.sqrt((xs * xs).sum(dim=-1, keepdim=True).clamp(min=self.eps**2))  # (..., 1)
        return (xs / norm).to(x.dtype) * self.weight


def make_norm(d: int, conventions: Conventions, bias: bool) -> LayerNorm | RMSNorm:
    """The norm a layer declares (§5.1-§5.3); ``bias``: a LayerNorm with a shift."""
    if conventions.norm_kind == "rms_norm":
        return RMSNorm(d, conventions.eps)
    return LayerNorm(d, conventions.eps, conventions.eps_placement, conventions.variance, bias)


class MultiHeadAttention(nn.Module):
    """§3.4: Concat(head_1..head_H) W^O, head_h = Attention(Q W^Q_h, K W^K_h, V W^V_h).

    §3.5 cross-attention is the same module with key = value = encoder memory.
    """

    def __init__(self, config: Config, conventions: Conventions):
        super().__init__()
        self.n_heads, self.d_k, self.d_v = config.n_heads, config.head_dim_k, config.head_dim_v
        self.fully_masked_rows = conventions.fully_masked_rows
        d, hk, hv = config.d_model, config.n_heads * self.d_k, config.n_heads * self.d_v
        self.q = Linear(d, hk, bias=config.has_attention_bias)
        self.k = Linear(d, hk, bias=config.has_attention_bias)
        self.v = Linear(d, hv, bias=config.has_attention_bias)
        self.o = Linear(hv, d, bias=config.has_attention_out_bias)

    def forward(
        self, query: Tensor, key: Tensor, value: Tensor, keep_mask: Tensor | None = None
    ) -> Tensor:
        (b, lq, _), lk, h = query.shape, key.shape[1], self.n_heads
        # §3.3: head h owns columns h*d .. (h+1)*d - 1 of each projection
        q = self.q(query).view(b, lq, h, self.d_k).transpose(1, 2)  # (B, H, Lq, d_k)
        k = self.k(key).view(b, lk, h, self.d_k).transpose(1, 2)  # (B, H, Lk, d_k)
        v = self.v(value).view(b, lk, h, self.d_v).transpose(1, 2)  # (B, H, Lk, d_v)
        heads = scaled_dot_product_attention(
            q, k, v, keep_mask, fully_masked_rows=self.fully_masked_rows
        )  # (B, H, Lq, d_v)
        heads = heads.transpose(1, 2).reshape(b, lq, h * self.d_v)  # (B, Lq, H*d_v)
        return self.o(heads)  # (B, Lq, D)


ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,  # exact: x * Phi(x)
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


class FeedForward(nn.Module):
    """§6.1: act(x W1^T + b1) W2^T + b2, at each position independently (§6.2)."""

    def __init__(self, config: Config, conventions: Conventions):
        super().__init__()
        self.activation = ACTIVATIONS[conventions.activation]
        self.fc1 = Linear(config.d_model, config.d_ff, bias=config.has_ffn_bias)
        self.fc2 = Linear(config.d_ff, config.d_model, bias=config.has_ffn_bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.activation(self.fc1(x)))  # (B, L, F) -> (B, L, D)


class Activation(nn.Module):
    """§6.3: the activation on its own, elementwise (no parameters)."""

    def __init__(self, conventions: Conventions):
        super().__init__()
        self.activation = ACTIVATIONS[conventions.activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.activation(x)


def residual(
    x: Tensor,
    sublayer: Callable[[Tensor], Tensor],
    norm: nn.Module,
    dropout: nn.Module,
    placement: str,
) -> Tensor:
    """§7.1: post-LN x = Norm(x + Dropout(f(x))); pre-LN x = x + Dropout(f(Norm(x)))."""
    if placement == "post":
        return norm(x + dropout(sublayer(x)))
    return x + dropout(sublayer(norm(x)))


class EncoderLayer(nn.Module):
    """§7.1: self-attention sublayer (norm1), then feed-forward sublayer (norm2)."""

    def __init__(self, config: Config, conventions: Conventions, dropout: float = 0.0):
        super().__init__()
        self.placement = conventions.norm_placement
        self.self_attn = MultiHeadAttention(config, conventions)
        self.norm1 = make_norm(config.d_model, conventions, config.norm_bias)
        self.ffn = FeedForward(config, conventions)
        self.norm2 = make_norm(config.d_model, conventions, config.norm_bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, keep_mask: Tensor | None = None) -> Tensor:
        def self_attention(h: Tensor) -> Tensor:
            return self.self_attn(h, h, h, keep_mask)

        x = residual(x, self_attention, self.norm1, self.dropout, self.placement)  # (B, L, D)
        return residual(x, self.ffn, self.norm2, self.dropout, self.placement)  # (B, L, D)


class DecoderLayer(nn.Module):
    """§7.2: masked self-attention (norm1), cross-attention over memory (norm2), FFN (norm3)."""

    def __init__(self, config: Config, conventions: Conventions, dropout: float = 0.0):
        super().__init__()
        self.placement = conventions.norm_placement
        self.self_attn = MultiHeadAttention(config, conventions)
        self.norm1 = make_norm(config.d_model, conventions, config.norm_bias)
        self.cross_attn = MultiHeadAttention(config, conventions)
        self.norm2 = make_norm(config.d_model, conventions, config.norm_bias)
        self.ffn = FeedForward(config, conventions)
        self.norm3 = make_norm(config.d_model, conventions, config.norm_bias)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        self_keep_mask: Tensor | None = None,
        memory_keep_mask: Tensor | None = None,
    ) -> Tensor:
        def self_attention(h: Tensor) -> Tensor:
            return self.self_attn(h, h, h, self_keep_mask)

        def cross_attention(h: Tensor) -> Tensor:  # queries from the decoder, keys from memory
            return self.cross_attn(h, memory, memory, memory_keep_mask)

        x = residual(x, self_attention, self.norm1, self.dropout, self.placement)  # (B, Lt, D)
        x = residual(x, cross_attention, self.norm2, self.dropout, self.placement)
        return residual(x, self.ffn, self.norm3, self.dropout, self.placement)


class Encoder(nn.Module):
    """§7.3: n_layers encoder layers; a pre-LN stack ends with a norm (a post-LN one only
    under final_norm='always')."""

    def __init__(self, config: Config, conventions: Conventions, dropout: float = 0.0):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(config, conventions, dropout) for _ in range(config.n_layers)
        )
        final = has_final_norm(conventions)
        self.norm = (
            make_norm(config.d_model, conventions, config.norm_bias) if final else nn.Identity()
        )

    def forward(self, x: Tensor, keep_mask: Tensor | None = None) -> Tensor:
        for layer in self.layers:
            x = layer(x, keep_mask)  # (B, L, D)
        return self.norm(x)


class Decoder(nn.Module):
    """§7.3: n_decoder_layers decoder layers, then the final norm (as in Encoder)."""

    def __init__(self, config: Config, conventions: Conventions, dropout: float = 0.0):
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(config, conventions, dropout) for _ in range(config.n_decoder_layers)
        )
        final = has_final_norm(conventions)
        self.norm = (
            make_norm(config.d_model, conventions, config.norm_bias) if final else nn.Identity()
        )

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        self_keep_mask: Tensor | None = None,
        memory_keep_mask: Tensor | None = None,
    ) -> Tensor:
        for layer in self.layers:
            x = layer(x, memory, self_keep_mask, memory_keep_mask)  # (B, Lt, D)
        return self.norm(x)


class Seq2Seq(nn.Module):
    """§8.1: the encoder-decoder Transformer; logits (B, Lt, V), not probabilities.

    §8.3: with tie_weights one matrix (``embedding``) embeds source and target tokens and
    projects to the vocabulary; otherwise ``src_embedding``, ``tgt_embedding``, ``generator``.
    """

    def __init__(self, config: Config, conventions: Conventions, dropout: float = 0.0):
        super().__init__()
        self.config, self.conventions = config, conventions
        v, d, pad = config.vocab_size, config.d_model, config.padding_idx
        if config.tie_weights:
            self.embedding = Embedding(v, d, pad)
        else:
            self.src_embedding = Embedding(v, d, pad)
            self.tgt_embedding = Embedding(v, d, pad)
            self.generator = Linear(d, v, bias=False)
        self.encoder = Encoder(config, conventions, dropout)
        self.decoder = Decoder(config, conventions, dropout)
        self.dropout = nn.Dropout(dropout)

    def embed(self, ids: Tensor, table: Embedding) -> Tensor:
        """§1.2, §2.1: E[id] * s + PE[pos], positions 0 .. L-1, then dropout."""
        c, conv = self.config, self.conventions
        if ids.dim() != 2:
            raise ValueError(f"token ids must have shape (B, L), got {tuple(ids.shape)}")
        scale, _ = embedding_scale(c.d_model, conv)
        length = ids.shape[1]
        pe = sinusoidal_pe(length, c.d_model, conv.pe_base, conv.pe_layout, c.max_len)  # (L, D)
        return self.dropout(table(ids) * scale + pe.to(table.weight))  # (B, L, D)

    def keep(self, ids: Tensor) -> Tensor:
        """§4.2: keys that are not padding, as (B, 1, 1, L)."""
        pad = self.config.padding_idx
        return key_padding(ids != pad if pad is not None else torch.ones_like(ids, dtype=bool))

    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        tied = self.config.tie_weights
        src_table = self.embedding if tied else self.src_embedding
        tgt_table = self.embedding if tied else self.tgt_embedding
        out_table = self.embedding.weight if tied else self.generator.weight  # (V, D)
        lt = tgt_ids.shape[-1]
        src_keep = self.keep(src_ids)  # (B, 1, 1, Ls)
        causal = causal_keep_mask(lt, lt, self.conventions.causal_alignment, tgt_ids.device)
        tgt_keep = self.keep(tgt_ids) & causal  # (B, 1, Lt, Lt)
        memory = self.encoder(self.embed(src_ids, src_table), src_keep)  # (B, Ls, D)
        x = self.decoder(self.embed(tgt_ids, tgt_table), memory, tgt_keep, src_keep)  # (B, Lt, D)
        _, logit_scale = embedding_scale(self.config.d_model, self.conventions)
        return matmul(x, out_table.T) * logit_scale  # (B, Lt, V)


class PatchEmbedding(nn.Module):
    """§9.1: cut (B, C, H, W) into p x p patches, flatten each in (c, y, x) order and project.

    That is a convolution with kernel = stride = p; patches come out row-major over the grid.
    """

    def __init__(self, channels: int, d_model: int, patch_size: int):
        super().__init__()
        self.channels, self.patch_size = channels, patch_size
        fan_in = channels * patch_size * patch_size
        self.weight = nn.Parameter(
            torch.randn(d_model, channels, patch_size, patch_size) / math.sqrt(fan_in)
        )
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, images: Tensor) -> Tensor:
        p = self.patch_size
        if images.dim() != 4 or images.shape[1] != self.channels:
            raise ValueError(
                f"images must have shape (B, {self.channels}, H, W), got {tuple(images.shape)}"
            )
        h, w = images.shape[-2:]
        if h % p or w % p:
            raise ValueError(
                f"image size {h}x{w} is not divisible by the patch size {p} (SPEC.md §9.1): "
                "resize or pad the image, or choose a patch size that divides it"
            )
        if _emulated(images):  # as ``matmul``: formed in float32, rounded once
            w, bias = self.weight.float(), self.bias.float()
            x = F.conv2d(images.float(), w, bias, stride=p).to(images.dtype)
        else:
            x = F.conv2d(images, self.weight, self.bias, stride=p)  # (B, D, H/p, W/p)
        return x.flatten(2).transpose(1, 2)  # (B, N_p, D)


class ViT(nn.Module):
    """§9: patches + class token + position embedding -> encoder -> pooled token -> head."""

    def __init__(self, config: Config, conventions: Conventions, dropout: float = 0.0):
        super().__init__()
        self.config, self.pooling = config, conventions.pooling
        d = config.d_model
        self.patch_embed = PatchEmbedding(config.channels, d, config.patch_size)
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, d))  # §9.2
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, config.n_patches + 1, d))  # §9.3
        self.dropout = nn.Dropout(dropout)
        self.encoder = Encoder(config, conventions, dropout)  # §9.4
        self.head = Linear(d, config.n_classes, bias=config.head_bias)  # §9.5

    def forward(self, images: Tensor) -> Tensor:
        c = self.config
        expected = (c.channels, c.image_size, c.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"images must have shape (B, {c.channels}, {c.image_size}, {c.image_size}), "
                f"got {tuple(images.shape)} (SPEC.md §9.1): the position embedding is "
                f"defined for {c.n_patches} patches of {c.patch_size}x{c.patch_size}"
            )
        x = self.patch_embed(images)  # (B, N_p, D)
        cls = self.cls_token.expand(x.shape[0], -1, -1)  # (B, 1, D)
        x = self.dropout(torch.cat([cls, x], dim=1) + self.pos_embed)  # (B, N_p + 1, D)
        x = self.encoder(x)  # (B, N_p + 1, D)
        pooled = x[:, 0] if self.pooling == "cls" else x[:, 1:].mean(dim=1)  # (B, D)
        return self.head(pooled)  # (B, n_classes)


# ------------------------------------------------- parameter-free components as modules


class Attention(nn.Module):
    """§3.1 scaled dot-product attention as a module (no parameters)."""

    def __init__(self, fully_masked_rows: str = "zero", scale: float | None = None):
        super().__init__()
        self.fully_masked_rows, self.scale = fully_masked_rows, scale

    def forward(self, q: Tensor, k: Tensor, v: Tensor, keep_mask: Tensor | None = None) -> Tensor:
        return scaled_dot_product_attention(q, k, v, keep_mask, self.scale, self.fully_masked_rows)


class SinusoidalPE(nn.Module):
    """§2.1 as a module: forward(length) -> the (length, d_model) table, float64."""

    def __init__(self, config: Config, conventions: Conventions):
        super().__init__()
        self.d_model, self.max_len = config.d_model, config.max_len
        self.base, self.layout = conventions.pe_base, conventions.pe_layout

    def forward(self, length: int) -> Tensor:
        return sinusoidal_pe(length, self.d_model, self.base, self.layout, self.max_len)


class RoPE(nn.Module):
    """§2.3 as a module: forward(x (..., L, d), positions (L,)) -> rotated x."""

    def __init__(self, conventions: Conventions):
        super().__init__()
        self.base, self.layout = conventions.pe_base, conventions.rope_layout
        self.conventions = conventions  # §2.6: the frequencies' scaling

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        omega = scaled_frequencies(x.shape[-1], self.conventions)
        return rope(x, positions, self.base, self.layout, omega)


# ------------------------------------------------------------ §11 decoder-only models


def rope_at(
    x: Tensor,
    positions: Tensor,
    base: float = 10000.0,
    layout: str = "interleaved",
    frequencies: Tensor | None = None,
):
    """§2.3 with a position per batch row: x (B, H, L, d), positions (B, L); ``frequencies``
    as in ``rope`` (§2.6)."""
    d = x.shape[-1]
    if frequencies is None:
        frequencies = _frequencies(d, base, "RoPE")
    omega = frequencies.to(x.device)  # (d/2,)
    if x.dtype in _HALF and not _careful(x, "rope_angles"):  # §10.10's hypothesis, as rope()
        omega = omega.to(x.dtype)
        theta = positions.to(device=x.device, dtype=x.dtype)[:, None, :, None] * omega
    elif _island(x, "rope_angles"):  # §10.12, as rope()
        angles = positions.to(device=x.device, dtype=_ISLAND_DTYPE)[:, None, :, None]
        theta = angles * omega.to(_ISLAND_DTYPE)
    else:
        theta = positions.to(device=x.device, dtype=torch.float64)[:, None, :, None] * omega
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)  # (B, 1, L, d/2)
    if layout == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]  # (B, H, L, d/2) each
    else:
        a, b = x[..., : d // 2], x[..., d // 2 :]
    ra, rb = a * cos - b * sin, a * sin + b * cos
    if layout == "interleaved":
        return torch.stack([ra, rb], dim=-1).flatten(-2)  # (B, H, L, d)
    return torch.cat([ra, rb], dim=-1)


class KVCache:
    """§11.6: per layer, the keys (rotated, under RoPE) and values of every token so far,
    (B, H_kv, T, d), growing along the sequence axis T."""

    def __init__(self) -> None:
        self.keys: dict[int, Tensor] = {}
        self.values: dict[int, Tensor] = {}

    def length(self, layer: int = 0) -> int:
        return self.keys[layer].shape[2] if layer in self.keys else 0

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if layer in self.keys:
            k = torch.cat([self.keys[layer], k], dim=2)  # (B, H_kv, T, d_k)
            v = torch.cat([self.values[layer], v], dim=2)  # (B, H_kv, T, d_v)
        self.keys[layer], self.values[layer] = k, v
        return k, v


def default_positions(batch: int, new: int, past: int, device=None) -> Tensor:
    """§11.7: positions past .. past + new - 1 in every row, (B, new)."""
    return torch.arange(past, past + new, device=device).expand(batch, new)


class CausalSelfAttention(nn.Module):
    """§11.1: causal multi-head self-attention, RoPE on Q and K under positions='rope';
    §11.2: n_kv_heads key/value heads, each serving n_heads / n_kv_heads query heads.

    With a ``cache`` the call holds only the new tokens; their keys and values are appended and
    query i of n new attends keys j <= T - n + i of the T so far (§11.6); under a sliding
    window w also j > T - n + i - w (§4.5: the cache keeps every key, the mask the last w).
    """

    def __init__(self, config: Config, conventions: Conventions):
        super().__init__()
        self.n_heads, self.n_kv = config.n_heads, config.kv_heads
        self.d_k, self.d_v = config.head_dim_k, config.head_dim_v
        self.rope = conventions.positions == "rope"
        self.base, self.layout = conventions.pe_base, conventions.rope_layout
        self.fully_masked_rows = conventions.fully_masked_rows
        self.window = conventions.sliding_window  # §4.5
        self.conventions = conventions  # §2.6: the RoPE frequencies' scaling, read in forward
        d, h, g = config.d_model, self.n_heads, self.n_kv
        bias = config.has_attention_bias  # §0.5
        self.q = Linear(d, h * self.d_k, bias=bias)
        self.k = Linear(d, g * self.d_k, bias=bias)
        self.v = Linear(d, g * self.d_v, bias=bias)
        self.o = Linear(h * self.d_v, d, bias=config.has_attention_out_bias)

    def forward(
        self,
        x: Tensor,
        key_padding: Tensor | None = None,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
    ) -> Tensor:
        (b, n, _), h, g = x.shape, self.n_heads, self.n_kv
        past = cache.length(layer) if cache is not None else 0
        if positions is None:
            positions = default_positions(b, n, past, x.device)
        q = self.q(x).view(b, n, h, self.d_k).transpose(1, 2)  # (B, H, n, d_k)
        k = self.k(x).view(b, n, g, self.d_k).transpose(1, 2)  # (B, H_kv, n, d_k)
        v = self.v(x).view(b, n, g, self.d_v).transpose(1, 2)  # (B, H_kv, n, d_v)
        if self.rope:
            omega = scaled_frequencies(self.d_k, self.conventions)  # (d_k/2,) float64
            q = rope_at(q, positions, self.base, self.layout, omega)
            k = rope_at(k, positions, self.base, self.layout, omega)
        if cache is not None:
            k, v = cache.update(layer, k, v)  # (B, H_kv, T, d)
        t = k.shape[2]
        k = k.repeat_interleave(h // g, dim=1)  # (B, H, T, d_k): kv head j -> j*g' .. (j+1)*g'-1
        v = v.repeat_interleave(h // g, dim=1)
        keep = causal_keep_mask(n, t, "bottom_right", x.device, self.window)  # (n, T)
        if key_padding is not None:
            keep = key_padding_keep(key_padding) & keep  # (B, 1, n, T)
        heads = scaled_dot_product_attention(
            q, k, v, keep, fully_masked_rows=self.fully_masked_rows
        )  # (B, H, n, d_v)
        return self.o(heads.transpose(1, 2).reshape(b, n, h * self.d_v))  # (B, n, D)


key_padding_keep = key_padding  # forward's argument shadows the name

# §11.3: SwiGLU's SiLU, or GeGLU with §6.1's exact or tanh GELU
GATE_ACTIVATIONS = {"silu": F.silu, **{k: ACTIVATIONS[k] for k in ("gelu", "gelu_tanh")}}


class GatedFeedForward(nn.Module):
    """§11.3: down(act(gate(x)) * up(x)), act = SiLU (SwiGLU) or GELU (GeGLU)."""

    def __init__(self, config: Config, conventions: Conventions):
        super().__init__()
        self.activation = GATE_ACTIVATIONS[conventions.gate_activation]
        bias = config.has_ffn_bias  # §0.5
        self.gate = Linear(config.d_model, config.d_ff, bias=bias)
        self.up = Linear(config.d_model, config.d_ff, bias=bias)
        self.down = Linear(config.d_ff, config.d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.activation(self.gate(x)) * self.up(x))  # (B, L, D)


class DecoderBlock(nn.Module):
    """§11.4: causal self-attention sublayer (norm1), then the FFN sublayer (norm2)."""

    def __init__(self, config: Config, conventions: Conventions, dropout: float = 0.0):
        super().__init__()
        self.placement = conventions.norm_placement
        self.self_attn = CausalSelfAttention(config, conventions)
        self.norm1 = make_norm(config.d_model, conventions, config.norm_bias)
        gated = conventions.ffn_kind == "gated"
        self.ffn = (
            GatedFeedForward(config, conventions) if gated else FeedForward(config, conventions)
        )
        self.norm2 = make_norm(config.d_model, conventions, config.norm_bias)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        key_padding: Tensor | None = None,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
    ) -> Tensor:
        def self_attention(h: Tensor) -> Tensor:
            return self.self_attn(h, key_padding, positions, cache, layer)

        x = residual(x, self_attention, self.norm1, self.dropout, self.placement)  # (B, n, D)
        return residual(x, self.ffn, self.norm2, self.dropout, self.placement)


class CausalLM(nn.Module):
    """§11.5: token embedding (+ learned positions), decoder blocks, final norm, logits.

    With tie_weights the token table is the output projection; otherwise ``lm_head``.
    """

    def __init__(self, config: Config, conventions: Conventions, dropout: float = 0.0):
        super().__init__()
        self.config, self.conventions = config, conventions
        d = config.d_model
        self.embedding = Embedding(config.vocab_size, d)
        if conventions.positions == "learned":
            self.pos_embedding = Embedding(config.max_len, d)
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            DecoderBlock(config, conventions, dropout) for _ in range(config.n_layers)
        )
        final = has_final_norm(conventions)
        self.norm = make_norm(d, conventions, config.norm_bias) if final else nn.Identity()
        if not config.tie_weights:
            self.lm_head = Linear(d, config.vocab_size, bias=False)

    def forward(
        self,
        ids: Tensor,
        key_padding: Tensor | None = None,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        b, n = ids.shape
        if positions is None:
            past = cache.length() if cache is not None else 0
            positions = default_positions(b, n, past, ids.device)
        scale, logit_scale = embedding_scale(self.config.d_model, self.conventions)
        x = self.embedding(ids) * scale  # (B, n, D)
        if self.conventions.positions == "learned":
            x = x + self.pos_embedding(positions)
        x = self.dropout(x)
        for i, layer in enumerate(self.layers):
            x = layer(x, key_padding, positions, cache, i)  # (B, n, D)
        head = self.lm_head.weight if not self.config.tie_weights else self.embedding.weight
        return matmul(self.norm(x), head.T) * logit_scale  # (B, n, V)


# ------------------------------------------------------------ building and canonical params


def build(
    component: str,
    config: Config,
    conventions: Conventions | None = None,
    *,
    dropout: float = 0.0,
) -> nn.Module:
    """A fresh float64 module for ``component`` whose parameter names are the canonical ones.

    ``conventions`` defaults to the component family's canonical ones; ``dropout`` is the
    probability at sublayer outputs and on the input embeddings (identity in ``eval()``).
    """
    rec = record(component)  # a ValueError that lists the components, for an unknown one
    module: nn.Module = rec.module(config, conventions or rec.canonical, dropout)
    return module.to(torch.float64)


def canonical_params(module: nn.Module) -> dict[str, np.ndarray]:
    """The module's parameters as canonical float64 arrays (a tied matrix appears once)."""
    return {
        name: p.detach().cpu().numpy().astype(np.float64, copy=True)
        for name, p in module.named_parameters()
    }


def load_canonical(module: nn.Module, params: Mapping[str, np.ndarray]) -> None:
    """Copy canonical parameters into ``module``; the names and shapes must match exactly."""
    own = dict(module.named_parameters())
    problems = [f"missing {k} {tuple(p.shape)}" for k, p in own.items() if k not in params]
    problems += [f"unexpected {k}" for k in params if k not in own]
    problems += [
        f"{k} has shape {tuple(np.shape(params[k]))}, expected {tuple(p.shape)}"
        for k, p in own.items()
        if k in params and tuple(np.shape(params[k])) != tuple(p.shape)
    ]
    if problems:
        raise ValueError(
            f"parameters do not match the canonical layout of {type(module).__name__} "
            "(SPEC.md §0.2): " + "; ".join(problems)
        )
    with torch.no_grad():
        for name, p in own.items():
            p.copy_(torch.as_tensor(np.asarray(params[name]), dtype=p.dtype, device=p.device))
