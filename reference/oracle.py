"""The numpy float64 oracle: every SPEC.md clause as a pure function.

One path per clause, the spec's, in reading order. Each function names the clause it
implements; shapes are written where they change. Inputs are converted to float64, so the
oracle is the ``gold`` of the tolerance rule whatever dtype the implementation under test
uses. Attention is computed in query chunks, so memory stays linear in sequence length.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from .conventions import CANONICAL, Config, Conventions
from .params import DECODER_CANONICAL, VIT_CANONICAL, has_final_norm, subparams

Array = np.ndarray
Params = Mapping[str, np.ndarray]

# Query rows per attention chunk: a chunk's scores are [..., QUERY_CHUNK, Lk] float64.
QUERY_CHUNK = 256


def _f64(x) -> Array:
    return np.asarray(x, dtype=np.float64)


# --------------------------------------------------------------------------- §1 embeddings


def embedding(ids, weight, *, scale: float = 1.0) -> Array:
    """§1.1, §1.2: x = E[id] * scale. Ids outside [0, vocab) are an error."""
    ids = np.asarray(ids)
    weight = _f64(weight)  # (V, D)
    if not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"token ids must be integers, got dtype {ids.dtype}")
    vocab = weight.shape[0]
    bad = (ids < 0) | (ids >= vocab)
    if bad.any():
        raise ValueError(
            f"token id {int(ids[bad].flat[0])} is outside the vocabulary [0, {vocab}) "
            f"(SPEC.md §1.1): {int(bad.sum())} id(s) out of range; enlarge vocab_size or "
            "map unknown tokens to [UNK]"
        )
    return weight[ids] * scale  # (..., D)


def embedding_scale(d_model: int, conventions: Conventions) -> tuple[float, float]:
    """§1.2: (factor on embeddings, factor on output logits) for the declared convention."""
    if conventions.embedding_scale == "emb":
        return math.sqrt(d_model), 1.0
    if conventions.embedding_scale == "prj":
        return 1.0, 1.0 / math.sqrt(d_model)
    return 1.0, 1.0


# --------------------------------------------------------------- §2 positional encodings


def _check_even(d: int, what: str) -> None:
    if d % 2:
        raise ValueError(f"{what} needs an even width, got d={d} (SPEC.md §10.6)")


def sinusoidal_pe(
    length: int,
    d_model: int,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    max_len: int | None = None,
) -> Array:
    """§2.1: PE[pos, 2i] = sin(pos * w_i), PE[pos, 2i+1] = cos(pos * w_i), w_i = base^(-2i/d).

    ``layout="concatenated"`` puts all sines first, then all cosines (same frequencies).
    """
    _check_even(d_model, "sinusoidal PE")
    if max_len is not None and length > max_len:
        raise ValueError(
            f"sequence length {length} exceeds the declared max_len={max_len} (SPEC.md §2.2)"
        )
    pos = np.arange(length, dtype=np.float64)[:, None]  # (L, 1)
    omega = base ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)  # (d/2,)
    angles = pos * omega  # (L, d/2)
    pe = np.empty((length, d_model), dtype=np.float64)
    if layout == "interleaved":
        pe[:, 0::2], pe[:, 1::2] = np.sin(angles), np.cos(angles)
    elif layout == "concatenated":
        pe[:, : d_model // 2], pe[:, d_model // 2 :] = np.sin(angles), np.cos(angles)
    else:
        raise ValueError(f"unknown PE layout {layout!r}: 'interleaved' or 'concatenated'")
    return pe


def rope_frequencies(
    d: int,
    *,
    base: float = 10000.0,
    scaling: str = "none",
    factor: float = 8.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_max_positions: int = 8192,
) -> Array:
    """§2.3, §2.6: the rotation frequencies omega_i = base^(-2i/d), i = 0 .. d/2 - 1, scaled.

    ``linear``: omega_i / factor (positions divided by factor). ``llama3`` (Llama 3.1,
    transformers' ``_compute_llama3_parameters``): with wavelength lambda_i = 2 pi / omega_i,
    lambda_i > L / low_freq_factor -> omega_i / factor; lambda_i < L / high_freq_factor ->
    omega_i; otherwise (1 - s) omega_i / factor + s omega_i with
    s = (L / lambda_i - low_freq_factor) / (high_freq_factor - low_freq_factor), where
    L = original_max_positions.
    """
    _check_even(d, "RoPE")
    omega = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # (d/2,)
    if scaling == "none":
        return omega
    if scaling == "linear":
        return omega / factor
    if scaling != "llama3":
        raise ValueError(f"unknown RoPE scaling {scaling!r}: 'none', 'linear' or 'llama3'")
    wavelength = 2.0 * np.pi / omega
    divided, kept = _llama3_bands(
        wavelength, original_max_positions, low_freq_factor, high_freq_factor
    )
    smooth = (original_max_positions / wavelength - low_freq_factor) / (
        high_freq_factor - low_freq_factor
    )
    blended = (1.0 - smooth) * omega / factor + smooth * omega
    return np.where(divided, omega / factor, np.where(kept, omega, blended))


def _llama3_bands(
    wavelength: Array, original: float, low_freq_factor: float, high_freq_factor: float
) -> tuple[Array, Array]:
    """§2.6's lines: the pairs whose frequency is divided by the factor (wavelength above
    L / low_freq_factor) and those kept (below L / high_freq_factor); the rest blend."""
    return wavelength > original / low_freq_factor, wavelength < original / high_freq_factor


def rope_frequencies_of(d: int, conventions: Conventions) -> Array:
    """``rope_frequencies`` under the declared pe_base and rope_scaling fields (§2.6)."""
    return rope_frequencies(
        d,
        base=conventions.pe_base,
        scaling=conventions.rope_scaling,
        factor=conventions.rope_scaling_factor,
        low_freq_factor=conventions.rope_low_freq_factor,
        high_freq_factor=conventions.rope_high_freq_factor,
        original_max_positions=conventions.rope_original_max_positions,
    )


# §2.6's llama3 bands, by wavelength: what a pair's frequency becomes.
ROPE_BANDS = ("divided", "blended", "kept")


def rope_bands(d: int, conventions: Conventions) -> tuple[str, ...]:
    """§2.6: the band of each of the d/2 pairs under the declared ``llama3`` scaling
    (``ROPE_BANDS``: wavelength above L / low_freq_factor, between, below
    L / high_freq_factor), as ``rope_frequencies`` draws the lines; () for any other
    scaling, which treats every pair alike."""
    if conventions.rope_scaling != "llama3":
        return ()
    _check_even(d, "RoPE")
    omega = conventions.pe_base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    divided, kept = _llama3_bands(
        2.0 * np.pi / omega,
        conventions.rope_original_max_positions,
        conventions.rope_low_freq_factor,
        conventions.rope_high_freq_factor,
    )
    return tuple(
        "divided" if v else "kept" if k else "blended" for v, k in zip(divided, kept, strict=True)
    )


def head_dim_in_every_band(conventions: Conventions, start: int, limit: int = 256) -> int | None:
    """The smallest even head dimension d >= ``start`` (and <= ``limit``) with a pair in each
    of §2.6's bands under the declared scaling: at a d with a band empty, that band's rule is
    never computed (d = 6 at base 500000 has no blended pair), so no comparison can see it.
    ``start`` itself when the scaling has no bands; None when no d up to ``limit`` has all."""
    if not rope_bands(max(2, start + start % 2), conventions):
        return start
    for d in range(max(2, start + start % 2), limit + 1, 2):
        if set(rope_bands(d, conventions)) == set(ROPE_BANDS):
            return d
    return None


def rope(
    x,
    positions=None,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    frequencies=None,
) -> Array:
    """§2.3: rotate each pair of x[..., L, d] by theta = pos * base^(-2i/d).

    ``interleaved`` pairs (x[2i], x[2i+1]); ``half_split`` pairs (x[i], x[i + d/2]).
    ``frequencies`` (d/2,) replaces base^(-2i/d): the scaled ones of §2.6
    (``rope_frequencies``).
    """
    x = _f64(x)
    length, d = x.shape[-2], x.shape[-1]
    _check_even(d, "RoPE")
    positions = np.arange(length) if positions is None else np.asarray(positions)
    if positions.shape != (length,):
        raise ValueError(f"positions must have shape ({length},), got {positions.shape}")
    if frequencies is None:
        omega = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # (d/2,)
    else:
        omega = _f64(frequencies)
        if omega.shape != (d // 2,):
            raise ValueError(f"RoPE frequencies must have shape ({d // 2},), got {omega.shape}")
    theta = positions.astype(np.float64)[:, None] * omega  # (L, d/2)
    cos, sin = np.cos(theta), np.sin(theta)
    if layout == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
    elif layout == "half_split":
        a, b = x[..., : d // 2], x[..., d // 2 :]
    else:
        raise ValueError(f"unknown RoPE layout {layout!r}: 'interleaved' or 'half_split'")
    ra, rb = a * cos - b * sin, a * sin + b * cos  # (..., L, d/2) each
    out = np.empty_like(x)
    if layout == "interleaved":
        out[..., 0::2], out[..., 1::2] = ra, rb
    else:
        out[..., : d // 2], out[..., d // 2 :] = ra, rb
    return out


# ------------------------------------------------------------------------------ §4 masks


def padding_keep_mask(lengths, length: int) -> Array:
    """§4.2: keep[b, j] = j < lengths[b]; shape (B, length)."""
    lengths = np.asarray(lengths)
    if (lengths < 0).any() or (lengths > length).any():
        raise ValueError(f"lengths must lie in [0, {length}], got {lengths.tolist()}")
    return np.arange(length)[None, :] < lengths[:, None]


def pad_keep_mask_from_ids(ids, padding_idx: int | None) -> Array:
    """§4.2: keep = ids != padding_idx (all True when there is no padding index)."""
    ids = np.asarray(ids)
    if padding_idx is None:
        return np.ones(ids.shape, dtype=bool)
    return ids != padding_idx


def key_padding(keep) -> Array:
    """§4.2: a (B, Lk) key-padding keep-mask as (B, 1, 1, Lk), masking keys for every query."""
    keep = np.asarray(keep)
    if keep.ndim != 2 or keep.dtype != np.bool_:
        raise ValueError(
            f"a key-padding keep-mask is boolean (B, Lk), got {keep.dtype} {keep.shape}"
        )
    return keep[:, None, None, :]


_expand_key_padding = key_padding  # combine_keep_masks' argument shadows the name


def causal_keep_mask(
    lq: int, lk: int, alignment: str = "top_left", window: int | None = None
) -> Array:
    """§4.3: query i may attend key j iff j <= i + offset (0 top-left, Lk - Lq bottom-right);
    §4.5: with a sliding ``window`` w, also j > i + offset - w (the last w keys)."""
    if alignment == "top_left":
        offset = 0
    elif alignment == "bottom_right":
        offset = lk - lq
    else:
        raise ValueError(f"unknown causal alignment {alignment!r}: 'top_left' or 'bottom_right'")
    query = np.arange(lq)[:, None] + offset  # (Lq, 1): each query's index among the keys
    keep = np.arange(lk)[None, :] <= query  # (Lq, Lk)
    if window is not None:
        keep &= sliding_window_keep(lq, lk, window, alignment)
    return keep


def sliding_window_keep(lq: int, lk: int, window: int, alignment: str = "top_left") -> Array:
    """§4.5: key j is inside query i's window of ``window`` keys iff j > i + offset - window
    (offset as §4.3); AND it with the causal mask for the sliding-window causal mask."""
    if window < 1:
        raise ValueError(f"a sliding window is at least 1 key wide, got {window} (§4.5)")
    offset = lk - lq if alignment == "bottom_right" else 0
    return np.arange(lk)[None, :] > np.arange(lq)[:, None] + offset - window  # (Lq, Lk)


def combine_keep_masks(
    lq: int,
    lk: int,
    *,
    key_padding=None,
    attn_mask=None,
    causal: bool = False,
    alignment: str = "top_left",
) -> Array | None:
    """§4.1: key padding (B, Lk) AND attn_mask (Lq, Lk) AND causal, as one keep-mask.

    Returns (B, 1, Lq, Lk) when a key-padding mask is given, (Lq, Lk) otherwise, and None
    when there is no mask at all. ``alignment`` places the causal diagonal (§4.3).
    """
    keep = None
    if attn_mask is not None:
        keep = check_keep_mask(attn_mask, (lq, lk))
    if causal:
        causal_mask = causal_keep_mask(lq, lk, alignment)
        keep = causal_mask if keep is None else keep & causal_mask
    if key_padding is not None:
        padding = _expand_key_padding(key_padding)  # (B, 1, 1, Lk)
        keep = padding if keep is None else padding & keep
    return keep


def check_keep_mask(keep_mask, scores_shape: tuple[int, ...]) -> Array:
    """§4.1: a boolean keep-mask whose shape broadcasts to the scores' (..., Lq, Lk)."""
    keep_mask = np.asarray(keep_mask)
    if keep_mask.dtype != np.bool_:
        raise ValueError(
            f"keep-masks are boolean (True = may attend), got dtype {keep_mask.dtype} "
            "(SPEC.md §4.1); an additive float mask is not a keep-mask: use mask == 0 "
            "for a 0/-inf mask"
        )
    if keep_mask.ndim not in (2, len(scores_shape)):
        raise ValueError(
            f"keep-mask of shape {keep_mask.shape} is ambiguous for scores "
            f"{scores_shape}: give (Lq, Lk) or a mask of the scores' rank "
            "(for a (B, Lk) key-padding mask, use key_padding())"
        )
    try:
        np.broadcast_shapes(keep_mask.shape, scores_shape)
    except ValueError:
        raise ValueError(
            f"keep-mask of shape {keep_mask.shape} does not broadcast to the attention "
            f"scores {scores_shape} (SPEC.md §4.1)"
        ) from None
    return keep_mask


# -------------------------------------------------------------------------- §3 attention


def softmax(x, axis: int = -1) -> Array:
    """exp(x - max) / sum(exp(x - max)): rows of the result sum to one."""
    x = _f64(x)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _weighted_values(weights, v, fully_masked_rows):
    """``weights @ v``. Under 'undefined' a key of weight 0 contributes nothing even where its
    value is NaN: the NaN of an earlier layer's unpromised row (a left pad's query, §4.4) is
    a placeholder, not a value, and must not reach the real tokens that hide that key, as
    IEEE arithmetic (0 * NaN) would make it do in a stack. Under every other policy the
    arithmetic is IEEE's, as an implementation's is ('nan' rows do spread)."""
    if fully_masked_rows != "undefined":
        return weights @ v
    finite = np.isfinite(v).all(axis=-1)  # (..., Lk)
    if finite.all():
        return weights @ v
    out = weights @ np.where(finite[..., None], v, 0.0)
    # a key the row does weigh keeps IEEE's answer (its NaN or inf reaches the output)
    reached = ((weights != 0) & ~finite[..., None, :]).any(axis=-1, keepdims=True)
    return np.where(reached, weights @ v, out) if reached.any() else out


def _attention_chunk(q, k, v, keep, scale, fully_masked_rows):
    scores = (q @ np.swapaxes(k, -1, -2)) * scale  # (..., c, Lk)
    if keep is None:
        return softmax(scores) @ v  # (..., c, dv)
    keep = np.broadcast_to(keep, scores.shape)
    empty = ~keep.any(axis=-1, keepdims=True)  # (..., c, 1): §4.4 rows with no key
    # An empty row gets uniform weights over every key (the 'uniform' policy); the other
    # policies overwrite it below.
    weights = softmax(np.where(keep | empty, scores, -np.inf))
    weights = np.where(empty, 1.0 / scores.shape[-1], weights)
    out = _weighted_values(weights, v, fully_masked_rows)  # (..., c, dv)
    if fully_masked_rows == "zero":
        out = np.where(empty, 0.0, out)
    elif fully_masked_rows in ("nan", "undefined"):
        out = np.where(empty, np.nan, out)
    return out


def scaled_dot_product_attention(
    q,
    k,
    v,
    keep_mask=None,
    *,
    scale: float | None = None,
    fully_masked_rows: str = "zero",
) -> Array:
    """§3.1: softmax(Q K^T * scale) V with softmax over keys, scale = 1/sqrt(d_k).

    q (..., Lq, d_k), k (..., Lk, d_k), v (..., Lk, d_v); keep_mask broadcastable to
    (..., Lq, Lk). Rows with no key kept follow ``fully_masked_rows`` (§4.4); 'undefined'
    gives NaN so that a check cannot use those rows by accident.
    """
    q, k, v = _f64(q), _f64(k), _f64(v)
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"attention shapes do not fit: q {q.shape}, k {k.shape}, v {v.shape} "
            "(need q[-1] == k[-1] and k[-2] == v[-2])"
        )
    if fully_masked_rows not in ("zero", "nan", "uniform", "undefined"):
        raise ValueError(f"unknown fully_masked_rows policy {fully_masked_rows!r}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    lq, lk = q.shape[-2], k.shape[-2]
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if keep_mask is not None:
        keep_mask = check_keep_mask(keep_mask, (*lead, lq, lk))
    out = np.empty((*lead, lq, v.shape[-1]), dtype=np.float64)  # (..., Lq, d_v)
    for start in range(0, lq, QUERY_CHUNK):
        rows = slice(start, start + QUERY_CHUNK)
        keep = None
        if keep_mask is not None:
            keep = keep_mask[..., rows, :] if keep_mask.shape[-2] != 1 else keep_mask
        out[..., rows, :] = _attention_chunk(q[..., rows, :], k, v, keep, scale, fully_masked_rows)
    return out


def attention_weights(q, k, keep_mask=None, *, scale: float | None = None) -> Array:
    """§3.1: the softmax weights (..., Lq, Lk); rows with no key kept are NaN."""
    q, k = _f64(q), _f64(k)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ np.swapaxes(k, -1, -2)) * scale
    if keep_mask is None:
        return softmax(scores)
    keep = np.broadcast_to(check_keep_mask(keep_mask, scores.shape), scores.shape)
    with np.errstate(invalid="ignore"):
        return softmax(np.where(keep, scores, -np.inf))


def split_heads(x, n_heads: int) -> Array:
    """§3.3: (B, L, H*d) -> (B, H, L, d); head h owns columns h*d .. (h+1)*d - 1."""
    b, length, width = x.shape
    if width % n_heads:
        raise ValueError(f"width {width} is not divisible by n_heads={n_heads} (SPEC.md §3.3)")
    return x.reshape(b, length, n_heads, width // n_heads).transpose(0, 2, 1, 3)


def merge_heads(x) -> Array:
    """§3.3: (B, H, L, d) -> (B, L, H*d), heads concatenated in order 0..H-1."""
    b, h, length, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, length, h * d)


def linear(x, params: Params, prefix: str = "") -> Array:
    """y = x W^T + b (nn.Linear layout, SPEC.md §0.1)."""
    y = _f64(x) @ _f64(params[f"{prefix}weight"]).T
    bias = params.get(f"{prefix}bias")
    return y if bias is None else y + _f64(bias)


def multi_head_attention(
    query,
    key,
    value,
    params: Params,
    *,
    n_heads: int,
    keep_mask=None,
    conventions: Conventions = CANONICAL,
) -> Array:
    """§3.4 (and §3.5 when key/value come from an encoder): (B, Lq, D) -> (B, Lq, D)."""
    q = split_heads(linear(query, params, "q."), n_heads)  # (B, H, Lq, d_k)
    k = split_heads(linear(key, params, "k."), n_heads)  # (B, H, Lk, d_k)
    v = split_heads(linear(value, params, "v."), n_heads)  # (B, H, Lk, d_v)
    heads = scaled_dot_product_attention(
        q, k, v, keep_mask, fully_masked_rows=conventions.fully_masked_rows
    )  # (B, H, Lq, d_v)
    return linear(merge_heads(heads), params, "o.")  # (B, Lq, D)


# -------------------------------------------------------------------------- §5 normalisation


def layer_norm(
    x,
    weight=None,
    bias=None,
    *,
    eps: float = 1e-5,
    eps_placement: str = "inside_sqrt",
    variance: str = "biased",
) -> Array:
    """§5.1: (x - mean) / sqrt(var + eps) * weight + bias over the last axis; §5.2 variants."""
    x = _f64(x)
    d = x.shape[-1]
    centred = x - x.mean(axis=-1, keepdims=True)
    if variance == "biased":
        var = (centred**2).sum(axis=-1, keepdims=True) / d
    elif variance == "unbiased":
        if d < 2:
            raise ValueError("unbiased variance needs at least 2 features (SPEC.md §5.2)")
        var = (centred**2).sum(axis=-1, keepdims=True) / (d - 1)
    else:
        raise ValueError(f"unknown variance {variance!r}: 'biased' or 'unbiased'")
    if eps_placement == "inside_sqrt":
        y = centred / np.sqrt(var + eps)
    elif eps_placement == "outside_sqrt":
        y = centred / (np.sqrt(var) + eps)
    else:
        raise ValueError(f"unknown eps placement {eps_placement!r}")
    if weight is not None:
        y = y * _f64(weight)
    if bias is not None:
        y = y + _f64(bias)
    return y


def rms_norm(x, weight=None, *, eps: float = 1e-5) -> Array:
    """§5.3: x / sqrt(mean(x^2) + eps) * weight."""
    x = _f64(x)
    y = x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps)
    return y if weight is None else y * _f64(weight)


def scale_norm(x, gain=None, *, eps: float = 1e-5) -> Array:
    """§5.4: g * x / max(||x||_2, eps) over the last axis, one scalar gain g (``gain``, [1])."""
    x = _f64(x)
    norm = np.sqrt((x**2).sum(axis=-1, keepdims=True))  # (..., 1): the L2 norm, not the RMS
    y = x / np.maximum(norm, eps)  # a clamp, not eps added: exact unit norm above eps
    return y if gain is None else y * _f64(gain).reshape(())


def norm(x, params: Params, prefix: str, conventions: Conventions) -> Array:
    """The norm a layer declares (§5.1-§5.3), with parameters under ``prefix``."""
    if conventions.norm_kind == "rms_norm":
        return rms_norm(x, params[f"{prefix}weight"], eps=conventions.eps)
    return layer_norm(
        x,
        params[f"{prefix}weight"],
        params.get(f"{prefix}bias"),  # absent: Config.norm_bias=False
        eps=conventions.eps,
        eps_placement=conventions.eps_placement,
        variance=conventions.variance,
    )


# ------------------------------------------------------------------------------- §6 FFN


def relu(x) -> Array:
    return np.maximum(_f64(x), 0.0)


def gelu(x) -> Array:
    """Exact GELU, x * Phi(x) = x/2 * (1 + erf(x / sqrt(2)))."""
    x = _f64(x)
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_tanh(x) -> Array:
    """The tanh approximation of GELU (GPT-2)."""
    x = _f64(x)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


ACTIVATIONS = {"relu": relu, "gelu": gelu, "gelu_tanh": gelu_tanh}


def activation(x, *, name: str = "relu") -> Array:
    """§6.3: the activation on its own, elementwise: relu, gelu (exact) or gelu_tanh."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}: one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name](x)


def feed_forward(x, params: Params, *, activation: str = "relu") -> Array:
    """§6.1: act(x W1^T + b1) W2^T + b2, applied at each position (§6.2)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}: one of {sorted(ACTIVATIONS)}")
    hidden = ACTIVATIONS[activation](linear(x, params, "fc1."))  # (B, L, F)
    return linear(hidden, params, "fc2.")  # (B, L, D)


# ---------------------------------------------------------------------------- §7 layers


def _sublayer(x, params: Params, norm_prefix: str, conventions: Conventions, fn) -> Array:
    """§7.1: post-LN x = Norm(x + f(x)); pre-LN x = x + f(Norm(x))."""
    if conventions.norm_placement == "post":
        return norm(x + fn(x), params, norm_prefix, conventions)
    return x + fn(norm(x, params, norm_prefix, conventions))


def encoder_layer(
    x, params: Params, *, n_heads: int, keep_mask=None, conventions: Conventions = CANONICAL
) -> Array:
    """§7.1: self-attention sublayer (norm1), then FFN sublayer (norm2). (B, L, D)."""
    attn = subparams(params, "self_attn.")
    ffn = subparams(params, "ffn.")
    x = _f64(x)

    def self_attention(h):
        return multi_head_attention(
            h, h, h, attn, n_heads=n_heads, keep_mask=keep_mask, conventions=conventions
        )

    x = _sublayer(x, params, "norm1.", conventions, self_attention)
    return _sublayer(
        x,
        params,
        "norm2.",
        conventions,
        lambda h: feed_forward(h, ffn, activation=conventions.activation),
    )


def decoder_layer(
    x,
    memory,
    params: Params,
    *,
    n_heads: int,
    self_keep_mask=None,
    memory_keep_mask=None,
    conventions: Conventions = CANONICAL,
) -> Array:
    """§7.2: masked self-attention (norm1), cross-attention (norm2), FFN (norm3). (B, Lt, D)."""
    self_attn = subparams(params, "self_attn.")
    cross_attn = subparams(params, "cross_attn.")
    ffn = subparams(params, "ffn.")
    x, memory = _f64(x), _f64(memory)

    def self_attention(h):
        return multi_head_attention(
            h, h, h, self_attn, n_heads=n_heads, keep_mask=self_keep_mask, conventions=conventions
        )

    def cross_attention(h):
        return multi_head_attention(
            h,
            memory,
            memory,
            cross_attn,
            n_heads=n_heads,
            keep_mask=memory_keep_mask,
            conventions=conventions,
        )

    x = _sublayer(x, params, "norm1.", conventions, self_attention)
    x = _sublayer(x, params, "norm2.", conventions, cross_attention)
    return _sublayer(
        x,
        params,
        "norm3.",
        conventions,
        lambda h: feed_forward(h, ffn, activation=conventions.activation),
    )


def _final_norm(x, params: Params, conventions: Conventions) -> Array:
    """§7.3: a pre-LN stack ends with a norm; a post-LN stack only under final_norm='always'."""
    return norm(x, params, "norm.", conventions) if has_final_norm(conventions) else x


def encoder(
    x,
    params: Params,
    config: Config,
    *,
    keep_mask=None,
    query_keep=None,
    conventions: Conventions = CANONICAL,
) -> Array:
    """§7.3: config.n_layers encoder layers, then the final norm of a pre-LN stack.

    ``query_keep`` (B, L) marks the real positions; under padded_query_rows='zero' (§4.2)
    the stack's output is zero at the other positions, before the final norm.
    """
    for i in range(config.n_layers):
        x = encoder_layer(
            x,
            subparams(params, f"layers.{i}."),
            n_heads=config.n_heads,
            keep_mask=keep_mask,
            conventions=conventions,
        )
    x = _f64(x)
    if conventions.padded_query_rows == "zero" and query_keep is not None:
        x = np.where(np.asarray(query_keep)[..., None], x, 0.0)
    return _final_norm(x, params, conventions)


def decoder(
    x,
    memory,
    params: Params,
    config: Config,
    *,
    self_keep_mask=None,
    memory_keep_mask=None,
    conventions: Conventions = CANONICAL,
) -> Array:
    """§7.3: config.n_decoder_layers decoder layers, then the final norm of a pre-LN stack."""
    for i in range(config.n_decoder_layers):
        x = decoder_layer(
            x,
            memory,
            subparams(params, f"layers.{i}."),
            n_heads=config.n_heads,
            self_keep_mask=self_keep_mask,
            memory_keep_mask=memory_keep_mask,
            conventions=conventions,
        )
    return _final_norm(_f64(x), params, conventions)


# ------------------------------------------------------------------------- §8 seq2seq


def embed_tokens(ids, weight, config: Config, conventions: Conventions) -> Array:
    """§8.1: E[id] * s + PE[pos] for positions 0..L-1 (L <= config.max_len)."""
    ids = np.asarray(ids)
    if ids.ndim != 2:
        raise ValueError(f"token ids must have shape (B, L), got {ids.shape}")
    emb_factor, _ = embedding_scale(config.d_model, conventions)
    pe = sinusoidal_pe(
        ids.shape[1],
        config.d_model,
        base=conventions.pe_base,
        layout=conventions.pe_layout,
        max_len=config.max_len,
    )
    return embedding(ids, weight, scale=emb_factor) + pe  # (B, L, D)


def seq2seq(
    src_ids, tgt_ids, params: Params, config: Config, *, conventions: Conventions = CANONICAL
) -> Array:
    """§8.1-§8.3: encoder-decoder Transformer, returning logits (B, Lt, V), not probabilities."""
    src_ids, tgt_ids = np.asarray(src_ids), np.asarray(tgt_ids)
    if config.tie_weights:
        src_table = tgt_table = out_table = params["embedding.weight"]
    else:
        src_table, tgt_table = params["src_embedding.weight"], params["tgt_embedding.weight"]
        out_table = params["generator.weight"]
    src_keep = key_padding(pad_keep_mask_from_ids(src_ids, config.padding_idx))  # (B,1,1,Ls)
    tgt_len = tgt_ids.shape[1]
    tgt_keep = key_padding(pad_keep_mask_from_ids(tgt_ids, config.padding_idx)) & (
        causal_keep_mask(tgt_len, tgt_len, conventions.causal_alignment)
    )  # (B, 1, Lt, Lt)
    memory = encoder(
        embed_tokens(src_ids, src_table, config, conventions),
        subparams(params, "encoder."),
        config,
        keep_mask=src_keep,
        conventions=conventions,
    )  # (B, Ls, D)
    hidden = decoder(
        embed_tokens(tgt_ids, tgt_table, config, conventions),
        memory,
        subparams(params, "decoder."),
        config,
        self_keep_mask=tgt_keep,
        memory_keep_mask=src_keep,
        conventions=conventions,
    )  # (B, Lt, D)
    _, logit_factor = embedding_scale(config.d_model, conventions)
    return (hidden @ _f64(out_table).T) * logit_factor  # (B, Lt, V)


# ----------------------------------------------------------------------------- §9 ViT


def patch_embed(images, weight, bias, *, patch_size: int) -> Array:
    """§9.1: (B, C, H, W) -> (B, N_p, D); each patch flattened in (c, y, x) order, patches
    row-major over the grid. Equal to a conv with kernel = stride = patch_size."""
    images = _f64(images)
    if images.ndim != 4:
        raise ValueError(f"images must have shape (B, C, H, W), got {images.shape}")
    b, c, h, w = images.shape
    p = patch_size
    if h % p or w % p:
        raise ValueError(
            f"image size {h}x{w} is not divisible by the patch size {p} (SPEC.md §9.1): "
            "resize or pad the image, or choose a patch size that divides it"
        )
    weight = _f64(weight)  # (D, C, p, p)
    if weight.shape[1:] != (c, p, p):
        raise ValueError(f"patch weight {weight.shape} does not fit {c} channels and patch {p}")
    patches = images.reshape(b, c, h // p, p, w // p, p)  # (B, C, gh, p, gw, p)
    patches = patches.transpose(0, 2, 4, 1, 3, 5).reshape(b, (h // p) * (w // p), c * p * p)
    return patches @ weight.reshape(weight.shape[0], -1).T + _f64(bias)  # (B, N_p, D)


def vit_tokens(images, params: Params, config: Config, conventions: Conventions) -> Array:
    """§9.1-§9.4: the encoder's output tokens (B, N_p + 1, D), class token first."""
    images = _f64(images)
    if images.ndim != 4 or images.shape[1:] != (
        config.channels,
        config.image_size,
        config.image_size,
    ):
        raise ValueError(
            f"images must have shape (B, {config.channels}, {config.image_size}, "
            f"{config.image_size}), got {images.shape} (SPEC.md §9.1)"
        )
    x = patch_embed(
        images,
        params["patch_embed.weight"],
        params["patch_embed.bias"],
        patch_size=config.patch_size,
    )  # (B, N_p, D)
    cls = np.broadcast_to(_f64(params["cls_token"]), (x.shape[0], 1, x.shape[2]))
    x = np.concatenate([cls, x], axis=1) + _f64(params["pos_embed"])  # (B, N_p + 1, D)
    return encoder(x, subparams(params, "encoder."), config, conventions=conventions)


def vit(
    images, params: Params, config: Config, *, conventions: Conventions = VIT_CANONICAL
) -> Array:
    """§9.5: pooled token (class token, or mean of patch tokens) -> head -> logits (B, classes)."""
    tokens = vit_tokens(images, params, config, conventions)
    pooled = tokens[:, 0] if conventions.pooling == "cls" else tokens[:, 1:].mean(axis=1)
    return linear(pooled, params, "head.")


# ------------------------------------------------------------ §11 decoder-only models


def position_ids(positions, batch: int, length: int) -> Array:
    """§11.7: position ids (B, L); default 0 .. L-1 in every row."""
    if positions is None:
        return np.broadcast_to(np.arange(length), (batch, length))
    positions = np.asarray(positions)
    if positions.shape != (batch, length) or not np.issubdtype(positions.dtype, np.integer):
        raise ValueError(
            f"position ids must be integers of shape ({batch}, {length}), got "
            f"{positions.dtype} {positions.shape} (SPEC.md §11.7)"
        )
    return positions


def rope_rows(
    x, positions, *, base: float = 10000.0, layout: str = "interleaved", frequencies=None
) -> Array:
    """§2.3 with a position per batch row: x (B, H, L, d), positions (B, L); ``frequencies``
    as in ``rope`` (§2.6)."""
    x = _f64(x)
    return np.stack(
        [
            rope(x[b], positions[b], base=base, layout=layout, frequencies=frequencies)
            for b in range(len(x))
        ]
    )


def repeat_kv(x, n_rep: int) -> Array:
    """§11.2: (B, H_kv, L, d) -> (B, H_kv * n_rep, L, d); key/value head j serves query heads
    j*n_rep .. (j+1)*n_rep - 1 (each head repeated in place, not the group tiled)."""
    return np.repeat(_f64(x), n_rep, axis=1)


def causal_self_attention(
    x,
    params: Params,
    *,
    n_heads: int,
    n_kv_heads: int | None = None,
    key_padding=None,
    positions=None,
    causal_keep=None,
    key_positions=None,
    conventions: Conventions = DECODER_CANONICAL,
) -> Array:
    """§11.1: (B, L, D) -> (B, L, D). Q = x Wq^T, K = x Wk^T, V = x Wv^T; under
    positions='rope' Q and K rotated at the position ids (§2.3); keep = causal (j <= i; with
    a sliding window w also j > i - w, §4.5) AND key padding (B, L); softmax(Q K^T /
    sqrt(d_k)) V per head; heads merged; output projection.
    §11.2: K and V have n_kv_heads heads, repeated to n_heads (``repeat_kv``).

    ``causal_keep`` (L, L) replaces the causal triangle (the diagnosis of cached decoding
    tries shifted ones); ``key_positions`` (B, L) rotates the keys at other position ids than
    the queries (the diagnosis of cached decoding); leave both None for the spec's.
    """
    x = _f64(x)
    b, length, _ = x.shape
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} does not divide n_heads={n_heads} (§11.2)")
    q = split_heads(linear(x, params, "q."), n_heads)  # (B, H, L, d_k)
    k = split_heads(linear(x, params, "k."), n_kv_heads)  # (B, H_kv, L, d_k)
    v = split_heads(linear(x, params, "v."), n_kv_heads)  # (B, H_kv, L, d_v)
    if conventions.positions == "rope":
        pos = position_ids(positions, b, length)
        omega = rope_frequencies_of(q.shape[-1], conventions)  # §2.6: scaled as declared
        q = rope_rows(q, pos, layout=conventions.rope_layout, frequencies=omega)
        k_pos = pos if key_positions is None else position_ids(key_positions, b, length)
        k = rope_rows(k, k_pos, layout=conventions.rope_layout, frequencies=omega)
    k, v = repeat_kv(k, n_heads // n_kv_heads), repeat_kv(v, n_heads // n_kv_heads)  # (B,H,L,d)
    if causal_keep is None:  # §4.3, §4.5: the causal triangle, cut to the sliding window
        keep = causal_keep_mask(length, length)
        if conventions.sliding_window is not None:
            keep = keep & sliding_window_keep(length, length, conventions.sliding_window)
    else:
        keep = np.asarray(causal_keep)
    if key_padding is not None:  # §4.1's combination, the causal keep as the attention mask
        keep = combine_keep_masks(length, length, key_padding=key_padding, attn_mask=keep)
    heads = scaled_dot_product_attention(
        q, k, v, keep, fully_masked_rows=conventions.fully_masked_rows
    )  # (B, H, L, d_v)
    return linear(merge_heads(heads), params, "o.")  # (B, L, D)


key_padding_mask = key_padding  # causal_self_attention's argument shadows the name


def silu(x) -> Array:
    """SiLU (swish), x * sigmoid(x)."""
    x = _f64(x)
    return x / (1.0 + np.exp(-x))


GATE_ACTIVATIONS = {"silu": silu, "gelu": gelu, "gelu_tanh": gelu_tanh}


def gated_feed_forward(x, params: Params, *, activation: str = "silu") -> Array:
    """§11.3: down(act(gate(x)) * up(x)); act = SiLU is SwiGLU, GELU is GeGLU."""
    if activation not in GATE_ACTIVATIONS:
        raise ValueError(
            f"unknown gate activation {activation!r}: one of {sorted(GATE_ACTIVATIONS)}"
        )
    hidden = GATE_ACTIVATIONS[activation](linear(x, params, "gate.")) * linear(x, params, "up.")
    return linear(hidden, params, "down.")  # (B, L, F) -> (B, L, D)


def decoder_ffn(x, params: Params, conventions: Conventions) -> Array:
    """§11.4: the block's FFN, §6.1 (ffn_kind='plain') or §11.3 (ffn_kind='gated')."""
    if conventions.ffn_kind == "gated":
        return gated_feed_forward(x, params, activation=conventions.gate_activation)
    return feed_forward(x, params, activation=conventions.activation)


def decoder_block(
    x,
    params: Params,
    *,
    n_heads: int,
    n_kv_heads: int | None = None,
    key_padding=None,
    positions=None,
    causal_keep=None,
    key_positions=None,
    conventions: Conventions = DECODER_CANONICAL,
) -> Array:
    """§11.4: causal self-attention sublayer (norm1), then FFN sublayer (norm2), pre- or
    post-LN (§7.1), LayerNorm or RMSNorm (§5). (B, L, D)."""
    attn, ffn = subparams(params, "self_attn."), subparams(params, "ffn.")

    def self_attention(h):
        return causal_self_attention(
            h,
            attn,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            key_padding=key_padding,
            positions=positions,
            causal_keep=causal_keep,
            key_positions=key_positions,
            conventions=conventions,
        )

    x = _sublayer(_f64(x), params, "norm1.", conventions, self_attention)
    return _sublayer(x, params, "norm2.", conventions, lambda h: decoder_ffn(h, ffn, conventions))


def causal_lm(
    ids,
    params: Params,
    config: Config,
    *,
    key_padding=None,
    positions=None,
    causal_keep=None,
    key_positions=None,
    conventions: Conventions = DECODER_CANONICAL,
    head: bool = True,
) -> Array:
    """§11.5: logits (B, L, V) = Norm(blocks(E[id] + P[pos])) W^T; P only under
    positions='learned' (RoPE acts inside attention); W = E when tie_weights, else lm_head.
    With ``head=False``, the normed hidden states (B, L, D) before the output projection
    (``causal_lm_logits`` of them is the logits): a caller comparing a long call's logits
    in chunks of positions never holds the whole (B, L, V) array."""
    ids = np.asarray(ids)
    if ids.ndim != 2:
        raise ValueError(f"token ids must have shape (B, L), got {ids.shape}")
    b, length = ids.shape
    pos = position_ids(positions, b, length)
    emb_factor, _ = embedding_scale(config.d_model, conventions)
    x = embedding(ids, params["embedding.weight"], scale=emb_factor)  # (B, L, D)
    if conventions.positions == "learned":
        if pos.size and (pos.min() < 0 or pos.max() >= config.max_len):
            raise ValueError(
                f"position ids must lie in [0, {config.max_len}) (SPEC.md §11.5): the learned "
                "table has max_len rows"
            )
        x = x + _f64(params["pos_embedding.weight"])[pos]  # (B, L, D)
    for i in range(config.n_layers):
        x = decoder_block(
            x,
            subparams(params, f"layers.{i}."),
            n_heads=config.n_heads,
            n_kv_heads=config.kv_heads,
            key_padding=key_padding,
            positions=pos,
            causal_keep=causal_keep,
            key_positions=key_positions,
            conventions=conventions,
        )
    x = _final_norm(_f64(x), params, conventions)
    return causal_lm_logits(x, params, config, conventions) if head else x


def causal_lm_logits(hidden, params: Params, config: Config, conventions: Conventions) -> Array:
    """§11.5: the logits of normed hidden states (..., D): hidden W^T times the logit
    factor of §1.2; W = E when tie_weights, else lm_head."""
    _, logit_factor = embedding_scale(config.d_model, conventions)
    table = params["embedding.weight"] if config.tie_weights else params["lm_head.weight"]
    return (_f64(hidden) @ _f64(table).T) * logit_factor  # (..., V)
