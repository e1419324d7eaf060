"""Mask hypotheses by class: a keep-mask added to the scores as a float bias (one family, its
offset solved for), a subject's own all-True mask read inverted on a call that passes none,
and the rule that a fit on a call where the hypothesis leaves every query without a key is
weak evidence (a degenerate call).

- ``mask.added_as_bias``: ``scores + c * keep`` for the spec's ``masked_fill(~keep, -inf)``.
  A boolean keep-mask passed where an additive float mask is expected is cast to 0/1 and
  added (c = 1: ``scores + mask.float()``); its complement added (``scores + (1 - mask)``)
  raises the pads by 1, which the softmax cannot tell from c = -1 (a constant added to every
  score of a row changes nothing). One family: c = +1 and -1 are tried first, then the c
  that comes closest to the output is solved for (``solved_mask_bias``) and must hold on a
  second, independent call. A c of a few units is the pads lowered, not removed; as c grows
  the hypothesis tends to the spec (c -> +inf) or to the mask inverted (c -> -inf).
  The masked scores filled with a finite value (``masked_fill(~keep, 0)``) are the same class:
  masked keys kept with a finite score (``FILL_VALUES``, tried after the other mask hypotheses).
- ``mask.polarity_inverted`` on a call without ``key_padding``: a subject that builds its own
  keep-mask of all True when none is given and reads it inverted hides every key.
- Degenerate fits (``degenerate``, ``whole_rows_only``): a hypothesis whose output on a call
  is the output with every key hidden (each query's row per the declared fully-masked-row
  policy) says only that no query saw a key; a causal mask without its diagonal on a call of
  one token, a mask read inverted on a call with no padding and the attention dropped all
  give that output. So does a mask hypothesis on a call whose masks hide whole rows only (no
  row mixes kept and hidden keys), where a mask ignored, inverted or added as a bias all
  give the same output. The explainer records such a fit as ``degenerate_fit`` and the
  root-cause ranking (``tck.reports.causes``) counts it as a property's finding, after a fit
  that reproduces the output on a call where queries do see keys.

The bias family is one family over the keep-mask the oracle's attention core receives:
the padding mask, the causal triangle (cut to a sliding window) and any explicit keep-mask,
combined as §4.1 combines them, so ``scores + tril.float()`` is named as well as ``scores +
key_padding.float()``, on every component whose oracle runs ``scaled_dot_product_attention``.
The offsets +1 and -1 are tried before ``mask.ignored`` (which is the family's member c = 0):
where a mask added as a bias reproduces the output, it is the more specific account of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from tck.reference import oracle
from tck.reference.codes import code as registered
from tck.reference.components import record
from tck.reference.tolerance import Comparison
from tck.reference.variants import oracle_variant, reaches

from .alternatives import Alternative, batch_rows, broadcast_keep, within

Evaluate = Callable[[Alternative], np.ndarray]

# The offsets tried before any is solved for: a 0/1 keep-mask added, and its complement.
BIAS_OFFSETS = (1.0, -1.0)
# The range c is solved over, a grid of this many points, then golden sections.
BIAS_RANGE = (-30.0, 30.0)
GRID_POINTS = 61
REFINE_STEPS = 40


def _sdpa_masked_by(
    masked: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> Callable[..., np.ndarray]:
    """§3.1's attention with the scores given to the softmax ``masked(scores, keep)`` (keep
    broadcast to the scores) instead of the masked keys removed; the spec's without a mask."""
    original = oracle.scaled_dot_product_attention

    def sdpa(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
        if keep_mask is None:
            return original(q, k, v, None, scale=scale, fully_masked_rows=fully_masked_rows)
        q, k, v = oracle._f64(q), oracle._f64(k), oracle._f64(v)
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        scores = (q @ np.swapaxes(k, -1, -2)) * scale
        keep = np.broadcast_to(np.asarray(keep_mask, dtype=bool), scores.shape)
        return oracle.softmax(masked(scores, keep)) @ v

    return sdpa


def _sdpa_mask_as_bias(offset: float) -> Callable[..., np.ndarray]:
    """§3.1's attention with the keep-mask added to the scores as ``offset * keep``."""
    return _sdpa_masked_by(lambda scores, keep: scores + offset * keep.astype(np.float64))


def _bias(component: str, offset: float) -> Alternative:
    lowered = (
        f"the masked keys' scores lowered by {offset:.4g}"
        if offset > 0
        else f"the masked keys' scores raised by {-offset:.4g}"
    )
    return Alternative(
        "mask.added_as_bias",
        f"the output is the spec's with the boolean keep-mask (padding and causal combined) "
        f"added to the scores as a float bias, scores + {offset:.4g} * keep ({lowered} "
        "relative to the kept ones, not removed: a 0/1 mask passed where an additive float "
        "mask is expected, scores + mask.float() or scores + (1 - mask)); turn the keep-mask "
        "into 0 / -inf, or pass it as bool (SPEC.md §4.1)",
        pieces={"scaled_dot_product_attention": _sdpa_mask_as_bias(offset)},
    )


# The finite values a port fills masked scores with where -inf (or finfo.min) belongs:
# masked_fill(~keep, 0) (a weight mask's fill reused for scores), and one unit either side.
FILL_VALUES = (0.0, -1.0, 1.0)


def _sdpa_masked_filled(value: float) -> Callable[..., np.ndarray]:
    """§3.1's attention with the masked scores set to ``value`` instead of removed."""

    def filled(scores: np.ndarray, keep: np.ndarray) -> np.ndarray:
        if np.allclose(scores[~keep], value, rtol=0.0, atol=1e-12):
            # every masked score already holds the value: the fill is the mask dropped
            raise ValueError(f"the masked scores are already {value}")
        return np.where(keep, scores, value)

    return _sdpa_masked_by(filled)


def _filled(value: float) -> Alternative:
    return Alternative(
        "mask.added_as_bias",
        f"the output is the spec's with the masked keys' scores (padding and causal combined) "
        f"set to {value:.4g} instead of removed: masked_fill(~keep, {value:.4g}) where -inf "
        "(or the dtype's lowest value) belongs, so every masked key keeps a finite weight; "
        "fill with -inf or torch.finfo(dtype).min (SPEC.md §4.1)",
        pieces={"scaled_dot_product_attention": _sdpa_masked_filled(value)},
    )


def mask_bias_hypotheses(component: str, inputs: Mapping[str, np.ndarray]) -> Iterator[Alternative]:
    """The keep-mask the attention core receives added as a 0/1 bias, and its complement
    (``BIAS_OFFSETS``). A call on which the core receives no mask makes both the spec, which
    the rule of distinguishable evidence rejects (``alternatives.fits``)."""
    if not reaches(component, "scaled_dot_product_attention"):
        return
    for offset in BIAS_OFFSETS:
        yield _bias(component, offset)


def mask_fill_hypotheses(component: str) -> Iterator[Alternative]:
    """The masked scores filled with a finite value (``FILL_VALUES``). Tried after every other
    mask hypothesis: on an input whose masked scores already hold the value (a fixture's zero
    scores) a mask ignored, or its causal part dropped, gives the same output and is the
    simpler account."""
    if not reaches(component, "scaled_dot_product_attention"):
        return
    for value in FILL_VALUES:
        yield _filled(value)


def solved_mask_bias(
    component: str, inputs: Mapping[str, np.ndarray], evaluate: Evaluate, test: np.ndarray
) -> Iterator[Alternative]:
    """The bias offset c under which ``scores + c * keep`` comes closest to ``test``, on a
    call that passes a mask or a causal flag (a model that builds its masks inside, from
    padding ids, gets the offsets +1 and -1 only: a search costs a hundred evaluations of
    it); nothing where the attention core receives no mask (every offset gives one output)."""
    if not reaches(component, "scaled_dot_product_attention"):
        return
    causal = inputs.get("causal")
    passes_mask = any(k in inputs for k in MASK_INPUTS)
    if not passes_mask and not (causal is not None and bool(np.asarray(causal).any())):
        return
    try:
        if np.array_equal(evaluate(_bias(component, 1.0)), evaluate(_bias(component, -1.0))):
            return
    except (ValueError, KeyError, IndexError, FloatingPointError):
        return

    def cost(c: float) -> float:
        try:
            out = evaluate(_bias(component, c))
        except (ValueError, KeyError, IndexError, FloatingPointError):
            return math.inf
        if out.shape != test.shape:
            return math.inf
        with np.errstate(invalid="ignore"):
            gap = np.abs(np.asarray(test, np.float64) - out)
        return float(np.nanmax(gap)) if np.isfinite(gap).any() else math.inf

    grid = np.linspace(*BIAS_RANGE, GRID_POINTS)
    costs = [cost(float(c)) for c in grid]
    best = int(np.argmin(costs))
    if not math.isfinite(costs[best]):
        return
    a, b = float(grid[max(best - 1, 0)]), float(grid[min(best + 1, len(grid) - 1)])
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = cost(c), cost(d)
    for _ in range(REFINE_STEPS):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = cost(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = cost(d)
    offset = c if fc <= fd else d
    if abs(offset) > 1e-6:
        yield _bias(component, offset)


def _combine_batch_flat(packed: bool) -> Callable[..., np.ndarray | None]:
    """§4.1's mask combination whose causal test compares each query's index in its row
    with each key's index in the whole batch: b * Lk + j (``packed=False``: the padded,
    flattened layout) or the count of real keys in the rows before b plus j (``packed``: the
    unpadded layout of variable-length kernels)."""
    original = oracle.combine_keep_masks

    def combine_keep_masks(
        lq, lk, *, key_padding=None, attn_mask=None, causal=False, alignment="top_left"
    ):  # type: ignore[no-untyped-def]
        if not causal or key_padding is None:
            raise ValueError("the batch-flat causal index needs a causal call with rows")
        keep = np.asarray(key_padding, bool)  # (B, Lk)
        rows = keep.shape[0]
        if packed:
            before = np.concatenate([[0], np.cumsum(keep.sum(axis=1))[:-1]])
        else:
            before = np.arange(rows) * lk
        offset = 0 if alignment == "top_left" else lk - lq
        flat = before[:, None] + np.arange(lk)[None, :]  # (B, Lk)
        query = np.arange(lq)[None, :, None] + offset  # (1, Lq, 1)
        causal_keep = flat[:, None, :] <= query  # (B, Lq, Lk)
        rest = original(lq, lk, key_padding=key_padding, attn_mask=attn_mask)
        rest = np.ones((1, 1, lq, lk), bool) if rest is None else rest
        return np.asarray(rest, bool) & causal_keep[:, None]

    return combine_keep_masks


def batch_flat_causal_hypotheses(component: str) -> Iterator[Alternative]:
    """The causal mask built from batch-flat key indices, padded or packed layout."""
    if not reaches(component, "combine_keep_masks"):
        return
    for packed, layout in ((False, "b * L + j"), (True, "the real keys before row b, + j")):
        yield Alternative(
            "mask.causal_batch_flat",
            "the output is the spec's with a causal mask that compares each query's index "
            f"within its row with each key's index within the whole batch ({layout}): right "
            "for the first row of the batch, the later rows lose their keys (a key index "
            "into the flattened or unpadded batch where the position in the sequence, "
            "index % L, is meant; SPEC.md §4.3, §10.2)",
            pieces={"combine_keep_masks": _combine_batch_flat(packed)},
        )


def _combine_or(lq, lk, *, key_padding=None, attn_mask=None, causal=False, alignment="top_left"):  # type: ignore[no-untyped-def]
    """§4.1's keep-masks combined with OR: a key is kept when any one of them keeps it."""
    parts = []
    if attn_mask is not None:
        parts.append(oracle.check_keep_mask(attn_mask, (lq, lk)))
    if causal:
        parts.append(oracle.causal_keep_mask(lq, lk, alignment))
    if key_padding is not None:
        parts.append(oracle.key_padding(key_padding))  # (B, 1, 1, Lk)
    if len(parts) < 2:
        raise ValueError("one mask: nothing is combined")
    keep = parts[0]
    for part in parts[1:]:
        keep = keep | part
    return keep


def _combine_without_causal(
    lq, lk, *, key_padding=None, attn_mask=None, causal=False, alignment="top_left"
):  # type: ignore[no-untyped-def]
    """§4.1's keep-masks with the causal triangle left out."""
    if not causal:
        raise ValueError("a call without a causal mask has none to drop")
    return oracle.combine_keep_masks(lq, lk, key_padding=key_padding, attn_mask=attn_mask)


def combined_with_or_hypotheses(component: str) -> Iterator[Alternative]:
    """The keep-masks combined with OR, wherever the oracle combines them; first the simpler
    account it can coincide with: on a right-padded causal call, padding OR causal keeps the
    same keys as the padding mask alone wherever the query is real (a pad key lies before a
    query only when the query is a pad too), which is the causal mask dropped."""
    if not reaches(component, "combine_keep_masks"):
        return
    yield Alternative(
        "mask.causal_leak",
        "the output is the spec's with the causal mask left out of the combination: every "
        "query sees the keys after it (the causal flag or triangle dropped where the padding "
        "mask is applied; SPEC.md §4.1, §4.3)",
        pieces={"combine_keep_masks": _combine_without_causal},
    )
    yield Alternative(
        "mask.combined_with_or",
        "the output is the spec's with its keep-masks combined by OR instead of AND: a key "
        "is kept when the padding mask or the causal (or attention) mask keeps it, so real "
        "keys after a query and padded keys before it are attended (mask_a | mask_b for "
        "mask_a & mask_b, or torch.maximum of two additive masks; SPEC.md §4.1)",
        pieces={"combine_keep_masks": _combine_or},
    )


def _finite_fill_pieces(tie: bool) -> Callable[[], dict[str, Callable[..., Any]]]:
    """Oracle pieces for a padding mask applied with a finite fill (``masked_fill(~keep,
    finfo.min)``, an additive ``-1e9``) where the other masks (causal, explicit) hide with
    -inf: a query whose every key the padding hides, among those the other masks leave,
    keeps those keys. ``tie``: their scores are all the fill (``finfo.min`` absorbs a score
    in float64; ``masked_fill`` replaces it), so the row weighs them equally; otherwise an
    additive fill leaves the scores' differences, and the row is a softmax over them."""

    def pieces() -> dict[str, Callable[..., Any]]:
        emptied: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id(keep) -> (keep, rows)

        def combine(
            lq, lk, *, key_padding=None, attn_mask=None, causal=False, alignment="top_left"
        ):  # type: ignore[no-untyped-def]
            keep = oracle.combine_keep_masks(
                lq,
                lk,
                key_padding=key_padding,
                attn_mask=attn_mask,
                causal=causal,
                alignment=alignment,
            )
            if key_padding is None:
                return keep
            other = oracle.combine_keep_masks(
                lq, lk, attn_mask=attn_mask, causal=causal, alignment=alignment
            )
            other = np.ones((lq, lk), bool) if other is None else other
            shape = np.broadcast_shapes(np.shape(keep), np.shape(other))
            keep, other = np.broadcast_to(keep, shape), np.broadcast_to(other, shape)
            rows = ~keep.any(axis=-1, keepdims=True) & other.any(axis=-1, keepdims=True)
            kept = np.where(rows, other, keep)
            emptied[id(kept)] = (kept, rows)
            return kept

        def attend(q, k, v, keep_mask=None, **kwargs):  # type: ignore[no-untyped-def]
            out = oracle.scaled_dot_product_attention(q, k, v, keep_mask, **kwargs)
            found = emptied.get(id(keep_mask))
            if not tie or found is None or found[0] is not keep_mask or not found[1].any():
                return out
            keep = broadcast_keep(q, k, keep_mask)
            weights = keep / np.maximum(keep.sum(axis=-1, keepdims=True), 1)
            rows = np.broadcast_to(found[1], (*keep.shape[:-1], 1))
            return np.where(rows, weights @ oracle._f64(v), out)

        return {"combine_keep_masks": combine, "scaled_dot_product_attention": attend}

    return pieces


def finite_fill_inverted_hypotheses(
    component: str, inputs: Mapping[str, np.ndarray]
) -> Iterator[Alternative]:
    """The key-padding mask read inverted and applied with a finite fill: where the inverted
    mask hides every key the causal mask leaves (each real token of a right-padded or
    unpadded row), the row is not empty but a uniform average of those keys' values
    (``finfo.min`` or ``masked_fill``), or a softmax over their scores (an additive
    ``-1e9``). The -inf convention's hypothesis (every keep-mask inverted) leaves such rows
    with no key and nothing to compare."""
    if "key_padding" not in inputs or not reaches(component, "combine_keep_masks"):
        return
    inverted = {**inputs, "key_padding": ~np.asarray(inputs["key_padding"], bool)}
    for tie, how in (
        (
            True,
            "every real key tied at the fill value, so a row whose every key is hidden "
            "weighs them equally (masked_fill(keep, finfo.min), or finfo.min added)",
        ),
        (
            False,
            "the fill added to the scores, so a row whose every key is hidden is still "
            "a softmax over them (scores + -1e9 * keep)",
        ),
    ):
        yield Alternative(
            "mask.polarity_inverted",
            "the output is the spec's with the key-padding mask read inverted (real tokens "
            f"hidden, pads attended) and applied with a finite fill: {how} (SPEC.md §4.1, "
            "§4.2)",
            pieces=_finite_fill_pieces(tie),
            inputs=inverted,
            nan="ignore",
        )


def _combine_inverted(
    lq, lk, *, key_padding=None, attn_mask=None, causal=False, alignment="top_left"
):  # type: ignore[no-untyped-def]
    """§4.1's keep-masks combined, then the result inverted: ``masked_fill(keep, -inf)`` on
    the one mask an implementation builds from padding and causal together."""
    if (key_padding is not None) + (attn_mask is not None) + bool(causal) < 2:
        raise ValueError("fewer than two masks: inverting the inputs covers one")
    return ~oracle.combine_keep_masks(
        lq, lk, key_padding=key_padding, attn_mask=attn_mask, causal=causal, alignment=alignment
    )


def combined_inverted_hypotheses(component: str) -> Iterator[Alternative]:
    """The keep-mask built from padding and the causal (or explicit) mask together, then
    applied inverted: each query attends the keys after it and the pads, and a query whose
    every key the inverted mask hides (the last real token of a row) follows the fill: empty
    under -inf (compared where rows keep a key), a uniform average under a finite one
    (``masked_fill(mask, -1e6)``). Inverting each input apart (``mask.polarity_inverted``'s
    first hypothesis) keeps the causal triangle, which this bug turns over too."""
    if not reaches(component, "combine_keep_masks"):
        return
    message = (
        "the output is the spec's with the combined keep-mask (padding and causal, or "
        "explicit, together) inverted: every query attends the keys it must not see (the "
        "keys after it, the pads) and ignores the rest; the mask built once from all its "
        "parts and applied with the wrong polarity (SPEC.md §4.1)"
    )
    pieces = {"combine_keep_masks": _combine_inverted}
    yield Alternative("mask.polarity_inverted", message, pieces=pieces, nan="ignore")
    yield Alternative(
        "mask.polarity_inverted", message, pieces=pieces, nan="ignore", keyless_nan=True
    )
    yield Alternative(
        "mask.polarity_inverted",
        message + "; a row left with no key weighs every key equally (a finite fill)",
        pieces=pieces,
        conventions={"fully_masked_rows": "uniform"},
        nan="ignore",
    )


def _partly_hidden(q, k, keep_mask) -> np.ndarray | None:  # type: ignore[no-untyped-def]
    """The query rows of one attention call with some key hidden, (..., Lq); None: none."""
    keep = broadcast_keep(q, k, keep_mask)
    return None if keep is None else ~keep.all(axis=-1)


def _sdpa_partial_rows_zeroed(q, k, v, keep_mask=None, **kwargs):  # type: ignore[no-untyped-def]
    out = oracle.scaled_dot_product_attention(q, k, v, keep_mask, **kwargs)
    partial = _partly_hidden(q, k, keep_mask)
    return out if partial is None else np.where(partial[..., None], 0.0, out)


def _sublayer_partial_rows_zeroed(name: str) -> Callable[..., np.ndarray]:
    """The attention sublayer ``name`` of the oracle (projections included) with its output
    rows zeroed wherever its attention hid some key from the query."""

    def sublayer(*args, **kwargs):  # type: ignore[no-untyped-def]
        rows: list[np.ndarray] = []

        def recording(q, k, v, keep_mask=None, **kw):  # type: ignore[no-untyped-def]
            partial = _partly_hidden(q, k, keep_mask)
            partial = None if partial is None else batch_rows(partial)
            if partial is not None:
                rows.append(partial)
            return oracle.scaled_dot_product_attention(q, k, v, keep_mask, **kw)

        out = getattr(oracle_variant({"scaled_dot_product_attention": recording}), name)(
            *args, **kwargs
        )
        for partial in rows:
            if partial.shape == np.shape(out)[:2]:
                out = np.where(partial[..., None], 0.0, out)
        return out

    return sublayer


# Key tiles a hand-written or ported tiled kernel uses: every small width, then powers of 2
MASK_TILES = (2, 3, 4, 5, 6, 8, 16, 32, 64, 128)


def _sdpa_tile_mask_from_start(tile: int) -> Callable[..., np.ndarray]:
    """§3.1 with the keep-mask of each key tile of ``tile`` read from the mask's first columns
    (``keep[..., :width]`` for ``keep[..., start:start + width]``)."""

    def sdpa(q, k, v, keep_mask=None, **kwargs):  # type: ignore[no-untyped-def]
        lk = np.shape(k)[-2]
        keep = broadcast_keep(q, k, keep_mask)
        if keep is None or lk <= tile:
            raise ValueError("one key tile, or no mask: the spec's attention")
        moved = np.empty_like(keep)
        for start in range(0, lk, tile):
            width = min(tile, lk - start)
            moved[..., start : start + width] = keep[..., :width]
        return oracle.scaled_dot_product_attention(q, k, v, moved, **kwargs)

    return sdpa


def tile_mask_hypotheses(component: str) -> Iterator[Alternative]:
    """A tiled attention whose every key tile reads the first tile's mask columns: the mask
    slice not offset by the tile's start, so past the first tile padding and causality fall
    on other keys. The rows it leaves with no key are §4.4's, not judged here."""
    if not reaches(component, "scaled_dot_product_attention"):
        return
    for tile in MASK_TILES:
        yield Alternative(
            registered("attention.tile_mask_misaligned"),
            f"the output is the spec's computed over key tiles of {tile} whose every tile "
            f"takes the mask's first {tile} columns (keep[..., :width] for keep[..., start:"
            "start + width]): past the first tile the mask lands on other keys (or the same "
            "with another tile size that cuts this call's keys alike; SPEC.md §3.1, §4.1)",
            pieces={"scaled_dot_product_attention": _sdpa_tile_mask_from_start(tile)},
            nan="ignore",
            keyless_nan=True,
        )


ATTENTION_SUBLAYERS = ("causal_self_attention", "multi_head_attention")


def partial_rows_zeroed_hypotheses(component: str) -> Iterator[Alternative]:
    """Query rows that have any key hidden (a future key, a pad) output zero, not only the
    rows with no key left: a guard for fully-masked rows (§4.4) written with ``any`` for
    ``all``. Zeroed in the attention's core (before the output projection), or in the
    sublayer's output (after it, as code around ``nn.MultiheadAttention`` does)."""
    if not reaches(component, "scaled_dot_product_attention"):
        return
    words = (
        "the output is the spec's with every query row that has some key hidden (a key after "
        "it, or a pad) set to zero {where}, not only the rows left with no key: the guard for "
        "fully-masked rows tests any() where it should test all() (SPEC.md §4.4, §4.1)"
    )
    yield Alternative(
        registered("mask.partial_rows_zeroed"),
        words.format(where="in the attention's output, before the output projection"),
        pieces={"scaled_dot_product_attention": _sdpa_partial_rows_zeroed},
    )
    for name in ATTENTION_SUBLAYERS:
        if reaches(component, name):
            yield Alternative(
                registered("mask.partial_rows_zeroed"),
                words.format(where="after the attention's output projection"),
                pieces={name: _sublayer_partial_rows_zeroed(name)},
            )


def _length_of(inputs: Mapping[str, np.ndarray], dim: str) -> int | None:
    names = ("x", "query", "ids", "tgt") if dim == "Lq" else ("key", "memory", "src")
    for name in names:
        if name in inputs and np.ndim(inputs[name]) >= 2:
            return int(np.shape(inputs[name])[1])
    return None


def default_mask_inverted(
    component: str, inputs: Mapping[str, np.ndarray]
) -> Iterator[Alternative]:
    """On a call without ``key_padding`` to a subject that takes one: its own all-True mask
    read inverted (every key hidden)."""
    if "key_padding" in inputs:
        return
    spec = next((s for s in record(component).inputs if s.name == "key_padding"), None)
    if spec is None or len(spec.dims) != 2:
        return
    first = next(iter(inputs.values()), None)
    length = _length_of(inputs, spec.dims[1])
    if first is None or np.ndim(first) < 2 or length is None:
        return
    hidden = np.zeros((int(np.shape(first)[0]), length), dtype=bool)
    yield Alternative(
        "mask.polarity_inverted",
        "the output is the spec's with every key hidden, as a key-padding keep-mask of all "
        "True (the subject's own default when the call passes none) read inverted would "
        "hide them (True = ignore): the keep-mask is read as a padding mask (SPEC.md §4.1)",
        inputs={**inputs, "key_padding": hidden},
        nan="ignore",
    )


def _sdpa_every_key_hidden(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
    lq, lk = np.shape(q)[-2], np.shape(k)[-2]
    hidden = np.zeros((lq, lk), dtype=bool)
    return oracle.scaled_dot_product_attention(
        q, k, v, hidden, scale=scale, fully_masked_rows=fully_masked_rows
    )


def every_key_hidden(alternative: Alternative, calls: list[int] | None = None) -> Alternative:
    """The oracle under ``alternative``'s conventions with every key of every attention
    hidden: what any hypothesis that leaves no query a key gives. ``calls``, when given,
    counts the hidden attentions computed: none when ``alternative`` replaces a piece that
    runs its own attention instead of the oracle's ``scaled_dot_product_attention``."""
    pieces = alternative.pieces() if callable(alternative.pieces) else alternative.pieces

    def hidden_attention(*args, **kwargs):  # type: ignore[no-untyped-def]
        if calls is not None:
            calls.append(1)
        return _sdpa_every_key_hidden(*args, **kwargs)

    return Alternative(
        "",
        "",
        pieces={**pieces, "scaled_dot_product_attention": hidden_attention},
        conventions=alternative.conventions,
        params=alternative.params,
        inputs=alternative.inputs,
    )


def degenerate(
    component: str,
    alternative: Alternative,
    gold: np.ndarray,
    evaluate: Evaluate,
    tolerance: Comparison | None,
    unpromised: np.ndarray | None = None,
) -> bool:
    """Is ``gold`` (``alternative``'s output on this call) the output with every key hidden?
    Then the fit says only that no query saw a key (``every_key_hidden``). Never for an
    alternative whose own attention bypasses the oracle's (RoPE rotating the queries only
    rewrites the whole causal attention): no key can be hidden from it, and its output
    would be compared with itself."""
    if not reaches(component, "scaled_dot_product_attention"):
        return False
    calls: list[int] = []
    try:
        hidden = evaluate(every_key_hidden(alternative, calls))
    except (ValueError, KeyError, IndexError):
        return False
    if not calls or hidden.shape != gold.shape:
        return False
    ignore = np.isnan(gold) | np.isnan(hidden)
    if unpromised is not None and np.shape(unpromised) == gold.shape:
        ignore = ignore | unpromised
    return bool((~ignore).any()) and within(gold, hidden, tolerance, ignore)


MASK_INPUTS = ("keep_mask", "key_padding", "attn_mask", "memory_key_padding")


def whole_rows_only(inputs: Mapping[str, np.ndarray]) -> bool:
    """Does the call pass masks none of whose rows mixes kept and hidden keys (every row all
    kept or all hidden)? On such a call a mask read inverted, ignored or added as a bias
    cannot be told apart (each leaves a hidden row attending every key): a mask hypothesis
    fitting it is degenerate."""
    masks = [np.asarray(inputs[k]) for k in MASK_INPUTS if k in inputs]
    masks = [m for m in masks if m.dtype == np.bool_ and m.ndim >= 1 and m.shape[-1] > 1]
    if not masks:
        return False
    return not any((m.any(axis=-1) & ~m.all(axis=-1)).any() for m in masks)


def note_degenerate(note: Callable[[Mapping[str, Any]], None], code: str) -> None:
    """Record on the check's result that the fit of ``code`` was degenerate."""
    note({"degenerate_fit": code})
