"""Explanations of an oracle mismatch by the attention core and the ViT token layout:
a softmax over any axis of the scores but the keys, a causal triangle that hides the
diagonal, a tiled kernel that drops its ragged last key tile, patch tokens read from the
patch grid in another axis order, and a position table added before the class token. (A
keep-mask added to the scores as 0/1 values is one family over the combined mask, in
``tck.conformance.diagnosis.hypotheses_masks``.)

Each hypothesis is an ``Alternative`` (``tck.conformance.diagnosis.alternatives``): the oracle with
the piece it lives in replaced, in a separate oracle passed to the comparison
(``tck.reference.variants``), judged like a convention: does it reproduce the
implementation's output within the failed comparison's bound, while differing from the
spec's? They apply to every component whose oracle runs the replaced piece, read from the
component's oracle call (``tck.reference.variants.reaches``), so a bug is named where it
lives and also in every subject that contains it.

The codes (registered in ``tck.reference.codes``):

- ``attention.softmax_axis_wrong``: ``softmax(scores, dim=a)`` for an axis ``a`` of the
  (B, H, Lq, Lk) scores other than the keys (the batch, the heads or the queries), or a
  softmax written out by hand with its maximum and its sum over the keys and the queries
  in either order;
- ``mask.causal_diagonal_hidden``: the causal triangle keeps j < i instead of j <= i
  (``triu(diagonal=0)``): query 0 has no key, its row follows a fully-masked-row policy;
- ``attention.ragged_key_tile_dropped``: a tiled kernel that visits whole key tiles only,
  the keys past (Lk // tile) * tile never attended;
- ``attention.value_uses_key_projection``: the core's values replaced by its keys (a value
  cache written with the keys);
- ``attention.input_read_wrong``: a projection given another attention input than its own
  (``W_v(key)``, ``W_k(value)``, the key and value inputs exchanged);
- ``vit.patch_order``: the patch embedding's (B, D, gh, gw) output turned into (B, N, D) in
  another axis order than (gh, gw, D) (a reshape without the transpose, a column-major grid);
- ``vit.cls_pos_embed_missing``: the position table is added to the patch tokens before the
  class token is prepended (rows 0..N-1 or 1..N), so the class token gets none.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from tck.reference import oracle, record
from tck.reference.codes import code as registered
from tck.reference.variants import reaches

from .alternatives import Alternative

# A finite fill for masked scores (masked_fill(-1e9), torch.finfo.min): with the softmax over
# another axis than the keys, an all-masked slice is then uniform rather than NaN.
MASK_FILL = -1e9

_AXIS_WORDS_4D = {0: "the batch axis", 1: "the head axis", 2: "the query axis"}


def _scores(q: Any, k: Any, scale: float | None) -> np.ndarray:
    q, k = oracle._f64(q), oracle._f64(k)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return (q @ np.swapaxes(k, -1, -2)) * scale


def _sdpa_softmax_over(axis: int, fill: float) -> Callable[..., np.ndarray]:
    """Scaled dot-product attention with the softmax over ``axis`` of the scores, masked
    scores filled with ``fill``: a finite one (an all-masked slice is uniform) or -inf (an
    all-masked slice is NaN, zeroed as ``nan_to_num`` does)."""

    def sdpa(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):
        scores = _scores(q, k, scale)
        if axis >= scores.ndim - 1:
            raise ValueError("no such axis")
        if keep_mask is not None:
            keep = np.broadcast_to(np.asarray(keep_mask), scores.shape)
            scores = np.where(keep, scores, fill)
        with np.errstate(invalid="ignore"):
            weights = np.nan_to_num(oracle.softmax(scores, axis=axis), nan=0.0)
        return weights @ oracle._f64(v)

    return sdpa


def _sdpa_softmax_split(max_axis: int, sum_axis: int) -> Callable[..., np.ndarray]:
    """Scaled dot-product attention with a softmax written out by hand whose maximum and
    sum run over different axes of the (..., Lq, Lk) scores: ``e = exp(s - s.max(max_axis));
    e / e.sum(sum_axis)``, masked scores -inf. Not a softmax over either axis (the shift no
    longer cancels); a slice whose every score is masked divides 0 by 0 (NaN, not judged)."""

    def sdpa(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):
        scores = _scores(q, k, scale)
        if max(-max_axis, -sum_axis) > scores.ndim:
            raise ValueError("no such axis")
        if keep_mask is not None:
            keep = np.broadcast_to(np.asarray(keep_mask), scores.shape)
            scores = np.where(keep, scores, -np.inf)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            e = np.exp(scores - scores.max(axis=max_axis, keepdims=True))
            return (e / e.sum(axis=sum_axis, keepdims=True)) @ oracle._f64(v)

    return sdpa


def _axis_words(axis: int, ndim: int) -> str:
    if axis == ndim - 2:
        return "the query axis"
    if ndim == 4:
        return _AXIS_WORDS_4D.get(axis, f"axis {axis}")
    return "the batch axis" if axis == 0 else f"axis {axis}"


def softmax_axis_hypotheses(component: str, ndim: int = 4) -> Iterator[Alternative]:
    """A softmax over each axis of the scores but the keys' (batch, heads, queries)."""
    if not reaches(component, "scaled_dot_product_attention"):
        return
    for axis, fill in itertools.product(range(ndim - 1), (MASK_FILL, -np.inf)):
        words = _axis_words(axis, ndim)
        yield Alternative(
            "attention.softmax_axis_wrong",
            f"the output is the spec's with the softmax taken over {words} of the scores "
            f"(softmax(scores, dim={axis}) on (B, H, Lq, Lk) scores) instead of over the keys "
            "(dim=-1): each weight is normalised across the wrong positions (SPEC.md §3.1)",
            pieces={"scaled_dot_product_attention": _sdpa_softmax_over(axis, fill)},
        )
    # a softmax written out by hand, its maximum over one axis and its sum over the other
    for (max_axis, over_max), (sum_axis, over_sum) in itertools.permutations(
        ((-1, "the keys"), (-2, "the queries"))
    ):
        yield Alternative(
            "attention.softmax_axis_wrong",
            f"the output is the spec's with a softmax written out by hand whose maximum runs "
            f"over {over_max} and whose sum over {over_sum} (e = exp(s - s.max({max_axis})); "
            f"e / e.sum({sum_axis})), where both run over the keys: the weights are no softmax "
            "over the keys (SPEC.md §3.1)",
            pieces={"scaled_dot_product_attention": _sdpa_softmax_split(max_axis, sum_axis)},
            nan="ignore",
        )


def _causal_diagonal_hidden(lq: int, lk: int, alignment: str = "top_left") -> np.ndarray:
    offset = 0 if alignment == "top_left" else lk - lq
    if alignment not in ("top_left", "bottom_right"):
        raise ValueError(f"unknown causal alignment {alignment!r}")
    return np.arange(lk)[None, :] < np.arange(lq)[:, None] + offset


def causal_diagonal_hypotheses(component: str) -> Iterator[Alternative]:
    """The causal triangle without its diagonal, under each fully-masked-row policy (query 0
    has no key left: NaN with a -inf fill, uniform with a finite one, 0 if zeroed); with NaN,
    the implementation must be non-finite exactly at the rows left without a key."""
    if not reaches(component, "causal_keep_mask"):
        return
    for policy in ("nan", "uniform", "zero"):
        yield Alternative(
            "mask.causal_diagonal_hidden",
            "the output is the spec's with a causal mask that also hides the diagonal (query i "
            "sees keys j < i, not j <= i: torch.triu(..., diagonal=0) where the future is "
            "triu(..., diagonal=1)): no token sees itself and the first query has no key at "
            f"all (its row is {'NaN' if policy == 'nan' else policy} here; SPEC.md §4.3)",
            pieces={"causal_keep_mask": _causal_diagonal_hidden},
            conventions={"fully_masked_rows": policy},
            nan="located" if policy == "nan" else "compare",
        )


# Key tiles of the tiled (online-softmax) kernels: FlashAttention's BLOCK_N and its ports.
KEY_TILES = (2, 4, 8, 16, 32, 64, 128)


def _sdpa_without_ragged_tile(tile: int) -> Callable[..., np.ndarray]:
    """§3.1's attention over the keys of whole tiles only: keys from (Lk // tile) * tile on
    are never visited (a loop ``range(0, Lk - tile + 1, tile)``, a grid of Lk // tile)."""

    def sdpa(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):
        lk = np.shape(k)[-2]
        if lk < tile:  # no whole tile: every key hidden, which any all-hidden account fits
            raise ValueError(f"{lk} keys hold no whole tile of {tile}")
        visited = np.arange(lk) < (lk // tile) * tile
        keep = visited if keep_mask is None else np.logical_and(keep_mask, visited)
        return oracle.scaled_dot_product_attention(
            q, k, v, keep, scale=scale, fully_masked_rows=fully_masked_rows
        )

    return sdpa


def ragged_tile_hypotheses(component: str) -> Iterator[Alternative]:
    """A tiled kernel without its boundary tile, for each usual tile size and each policy of
    a row left with no key (a padded row whose real keys all lie in the ragged tile). The
    spec's own output where the key length is a multiple of the tile: then it does not fit.
    Not tried on a call with fewer keys than the tile: it would hide every key, which a mask
    read inverted or a softmax that overflowed explains as well."""
    if not reaches(component, "scaled_dot_product_attention"):
        return
    for tile, policy in itertools.product(KEY_TILES, ("zero", "nan", "uniform")):
        yield Alternative(
            "attention.ragged_key_tile_dropped",
            f"the output is the spec's with the keys past the last whole tile of {tile} (or of "
            "another size that cuts this call's keys at the same place) never attended (a "
            f"tiled kernel's loop over key tiles stops at (Lk // {tile}) * {tile}: the ragged "
            "last tile is dropped, and a call with fewer keys than a tile attends none, its "
            f"rows {'NaN' if policy == 'nan' else policy} here; SPEC.md §3.1)",
            pieces={"scaled_dot_product_attention": _sdpa_without_ragged_tile(tile)},
            conventions={"fully_masked_rows": policy},
            nan="located" if policy == "nan" else "compare",
        )


def _sdpa_values_from_keys(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
    """§3.1 with the keys, as the attention core receives them (rotated, repeated per query
    head), in place of the values."""
    if np.shape(k)[-1] != np.shape(v)[-1]:
        raise ValueError("keys and values of different widths")
    return oracle.scaled_dot_product_attention(
        q, k, k, keep_mask, scale=scale, fully_masked_rows=fully_masked_rows
    )


def values_from_keys_hypotheses(component: str) -> Iterator[Alternative]:
    """The attention core reading its values from the keys it receives: a cache whose value
    buffer is written with the keys (``value_cache[pos] = k``), ``v = k`` after the rotation.
    (The values computed with the key projection's weights, before any rotation, is
    ``hypotheses_fitted.sibling_leaf_hypotheses``.)"""
    if not reaches(component, "scaled_dot_product_attention"):
        return
    yield Alternative(
        "attention.value_uses_key_projection",
        "the output is the spec's with the attention's values replaced by its keys, as the "
        "attention core receives them (after RoPE, repeated per query head): a cache whose "
        "value buffer is written with the keys, or v = k after the key's rotation (SPEC.md "
        "§3.1, §3.4)",
        pieces={"scaled_dot_product_attention": _sdpa_values_from_keys},
    )


# (input read, input it should read) of an attention that takes its query, key and value
# inputs apart (§3.4, §3.5): one projection given a sibling's input, or two exchanged
_PROJECTION = {"query": "q = W_q", "key": "k = W_k", "value": "v = W_v"}
# Each projection applied to each other input (v = W_v(key), k = W_k(query): a copied line
# that kept the self-attention's ``x``), then the keys and values both from the query input
# (self-attention where the inputs differ), and the key and value inputs exchanged.
INPUT_SWAPS = (
    *(
        (
            {target: source},
            f"the {target} projection applied to the {source} input "
            f"({_PROJECTION[target]}({source}))",
        )
        for target in ("value", "key", "query")
        for source in ("key", "value", "query")
        if source != target
    ),
    (
        {"key": "query", "value": "query"},
        "the keys and values projected from the query input (self-attention where the "
        "inputs differ)",
    ),
    ({"key": "value", "value": "key"}, "the key and value inputs exchanged"),
)


def input_swap_hypotheses(component: str, inputs: Mapping[str, Any]) -> Iterator[Alternative]:
    """A projection that reads another attention input than its own: the right weights on
    the wrong tensor. Told apart only on a call whose inputs differ (cross-attention, a
    module called with distinct key and value), so tried wherever the call passes them."""
    names = {spec.name for spec in record(component).inputs}
    for swap, words in INPUT_SWAPS:
        if not set(swap) | set(swap.values()) <= names & set(inputs):
            continue
        given = {target: inputs[source] for target, source in swap.items()}
        if any(np.shape(given[t]) != np.shape(inputs[t]) for t in given):
            continue
        yield Alternative(
            registered("attention.input_read_wrong"),
            f"the output is the spec's with {words}: a projection reads another attention "
            "input than its own, so the output follows the wrong tensor wherever the inputs "
            "differ (SPEC.md §3.4, §3.5)",
            inputs={**inputs, **given},
        )


_GRID_AXES = {1: "grid rows", 2: "grid columns", 3: "embedding channels"}


def _patch_embed_laid_out(order: tuple[int, int, int]) -> Callable[..., np.ndarray]:
    """§9.1's patch embedding whose (B, gh, gw, D) grid is read in axis ``order``."""
    original = oracle.patch_embed

    def patch_embed(images, weight, bias, *, patch_size):
        out = original(images, weight, bias, patch_size=patch_size)  # (B, N, D)
        b, _, h, w = np.shape(images)
        gh, gw, d = h // patch_size, w // patch_size, out.shape[-1]
        grid = out.reshape(b, gh, gw, d).transpose(0, *order)
        return np.ascontiguousarray(grid).reshape(b, gh * gw, d)

    return patch_embed


def patch_layout_hypotheses(component: str) -> Iterator[Alternative]:
    """Patch tokens read from the embedded patch grid in any axis order but (rows, columns,
    channels): the conv's (B, D, gh, gw) output reshaped to (B, N, D) without
    ``flatten(2).transpose(1, 2)``, a grid read column-major, and the other orders."""
    if not reaches(component, "patch_embed"):
        return
    for order in itertools.permutations((1, 2, 3)):
        if order == (1, 2, 3):
            continue
        shown = ", ".join(_GRID_AXES[a] for a in order)
        # channels last: the tokens are the patches, in another order (the grid read
        # column-major); otherwise each token mixes several patches' channels
        effect = (
            "token n is not patch n: the grid is read column-major"
            if order[-1] == 3
            else "each token mixes several patches' channels"
        )
        yield Alternative(
            "vit.patch_order",
            f"the output is the spec's with the patch tokens read from the embedded patch grid "
            f"in the order ({shown}) instead of (grid rows, grid columns, channels): the "
            "(B, D, h, w) patch embedding is turned into (B, N, D) tokens without the "
            f"right transpose (x.flatten(2).transpose(1, 2)), so {effect} (SPEC.md §9.1)",
            pieces={"patch_embed": _patch_embed_laid_out(order)},
        )


def _vit_tokens_pos_before_cls(rows: str) -> Callable[..., np.ndarray]:
    """§9.1-§9.4 with the position table added to the patch tokens before the class token is
    prepended: rows 0..N-1 (``pos_embed[:, :N]``) or 1..N (``pos_embed[:, 1:]``)."""

    def vit_tokens(images, params, config, conventions):
        x = oracle.patch_embed(
            oracle._f64(images),
            params["patch_embed.weight"],
            params["patch_embed.bias"],
            patch_size=config.patch_size,
        )
        pos = oracle._f64(params["pos_embed"])
        n = x.shape[1]
        x = x + (pos[:, :n] if rows == "first" else pos[:, 1 : n + 1])
        cls = np.broadcast_to(oracle._f64(params["cls_token"]), (x.shape[0], 1, x.shape[2]))
        x = np.concatenate([cls, x], axis=1)
        return oracle.encoder(
            x, oracle.subparams(params, "encoder."), config, conventions=conventions
        )

    return vit_tokens


def cls_position_hypotheses(component: str) -> Iterator[Alternative]:
    """The position table added to the patch tokens only, before the class token."""
    if not reaches(component, "vit_tokens"):
        return
    for rows, words in (
        ("first", "rows 0..N-1 (pos_embed[:, :N]): patch i gets the row of i - 1"),
        ("last", "rows 1..N (pos_embed[:, 1:])"),
    ):
        yield Alternative(
            "vit.cls_pos_embed_missing",
            "the output is the spec's with the position table added to the patch tokens "
            f"before the class token is prepended, {words}: the class token gets no position "
            "embedding (SPEC.md §9.2, §9.3)",
            pieces={"vit_tokens": _vit_tokens_pos_before_cls(rows)},
        )


def layout_hypotheses(component: str) -> Iterator[Alternative]:
    """Every hypothesis of this module for ``component``, in the order they are tried."""
    yield from softmax_axis_hypotheses(component)
    yield from patch_layout_hypotheses(component)
    yield from cls_position_hypotheses(component)
    yield from causal_diagonal_hypotheses(component)
    yield from ragged_tile_hypotheses(component)
    yield from values_from_keys_hypotheses(component)
