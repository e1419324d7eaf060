"""Explanations of an oracle mismatch by a tiled (online) softmax that combines its key tiles
wrongly: §3.1's attention computed one key tile at a time, as FlashAttention's loop (a running
maximum, sum and accumulator, rescaled as the maximum grows; Dao et al. 2022, Algorithm 1) or
as the memory-efficient attention of Rabe & Staats 2021 (each tile summarised by its maximum,
its sum of exponentials and its weighted values, the summaries rescaled to the overall
maximum and added), with one flaw at a time:

- a factor inverted or left out: the summaries rescaled by exp(M - m_t) instead of
  exp(m_t - M), or not at all; the running accumulator or the running sum not rescaled when
  the maximum grows;
- a tile's exponentials taken against the tile's own maximum while the running statistics
  use the overall one;
- a tile's weighted values normalised by the tile's own sum before they are combined (and
  normalised again by the total);
- the maximum the summaries are rescaled to taken over the heads instead of over the tiles
  (each tile then rescaled against another reference);
- a last partial tile moved back to end at the last key (``lax.dynamic_slice`` clamps its
  start), so the keys it shares with the tile before are counted twice;
- masked scores at -inf and no guard: a tile whose keys are all masked for a query has a
  maximum of -inf and turns that query's row NaN although it has keys in other tiles.

Every flaw is tried for each usual tile size below the call's key count (a single tile is
the spec's softmax). Each is an ``Alternative`` on the attention core's piece, judged like
every hypothesis (``alternatives.fits``): it must reproduce the output within the failed
comparison's bound and differ from the spec's. A tiled kernel that drops its ragged last tile
is ``hypotheses_layout.ragged_tile_hypotheses``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from tck.reference import oracle
from tck.reference.codes import code as registered
from tck.reference.variants import reaches

from .alternatives import Alternative
from .hypotheses_layout import KEY_TILES, _scores

CODE = "attention.online_softmax_wrong"

# flaw -> (the combination it lives in, what the kernel does)
FLAWS: dict[str, tuple[str, str]] = {
    "summaries_rescaled_inverted": (
        "summaries",
        "rescales each key tile's sum and weighted values by exp(M - m_t) instead of "
        "exp(m_t - M) (m_t the tile's maximum, M the overall one)",
    ),
    "summaries_rescaled_inverted_unguarded": (
        "summaries",
        "rescales each key tile's sum and weighted values by exp(M - m_t) instead of "
        "exp(m_t - M), which overflows for a tile whose keys are all masked for a query and "
        "turns that query's row NaN",
    ),
    "summaries_not_rescaled": (
        "summaries",
        "adds the key tiles' sums and weighted values without rescaling them to the overall "
        "maximum (each tile's exponentials are taken against its own maximum)",
    ),
    "summaries_normalised_twice": (
        "summaries",
        "normalises each key tile's weighted values by the tile's own sum before the tiles "
        "are combined, and again by the total",
    ),
    "maximum_over_heads": (
        "summaries",
        "rescales the key tiles' summaries to a maximum taken over the heads of each tile "
        "instead of over the tiles, so the tiles are rescaled against different references",
    ),
    "last_tile_clamped": (
        "summaries",
        "moves a last partial key tile back to end at the last key (a clamped slice start), "
        "so the keys it shares with the tile before are counted twice",
    ),
    "accumulator_not_rescaled": (
        "running",
        "does not rescale the running output accumulator by exp(m_old - m_new) when the "
        "running maximum grows (the running sum is rescaled)",
    ),
    "sum_not_rescaled": (
        "running",
        "does not rescale the running sum by exp(m_old - m_new) when the running maximum "
        "grows (the accumulator is rescaled)",
    ),
    "tile_maximum": (
        "running",
        "takes each tile's exponentials against the tile's own maximum while rescaling the "
        "running statistics to the running maximum",
    ),
    "tile_normalised": (
        "running",
        "adds each key tile's weighted values normalised by the tile's own sum to the "
        "accumulator, which is normalised again by the running sum",
    ),
    "masked_tile_nan": (
        "summaries",
        "fills masked scores with -inf and does not guard a tile whose keys are all masked "
        "for a query: its maximum is -inf, exp(-inf - (-inf)) is NaN, and the query's row "
        "turns NaN although it has keys in other tiles",
    ),
    "masked_leading_tile_nan": (
        "running",
        "fills masked scores with -inf and does not guard the running maximum: while every "
        "key seen so far is masked for a query it is -inf, exp(-inf - (-inf)) is NaN, and "
        "the query's row turns NaN",
    ),
}

# The flaws that leave a query NaN where a tile it reads has every key masked: judged by where
# the implementation is NaN (alternatives.NAN_RULES "located").
UNGUARDED = frozenset(
    {"summaries_rescaled_inverted_unguarded", "masked_tile_nan", "masked_leading_tile_nan"}
)

_FORM_WORDS = {
    "summaries": "summarised per key tile and combined (Rabe & Staats' memory-efficient attention)",
    "running": "with a running maximum, sum and accumulator (FlashAttention's loop)",
}


def _tiles(lk: int, tile: int, clamped: bool) -> list[slice]:
    starts = range(0, lk, tile)
    if clamped:
        return [slice(min(s, lk - tile), min(s, lk - tile) + tile) for s in starts]
    return [slice(s, s + tile) for s in starts]


def _exp_against(scores: np.ndarray, maximum: np.ndarray, guarded: bool) -> np.ndarray:
    """exp(scores - maximum); where ``guarded`` a maximum of -inf counts as 0 (every key of
    the slice masked: its exponentials are 0, not NaN)."""
    if guarded:
        maximum = np.where(np.isneginf(maximum), 0.0, maximum)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.exp(scores - maximum)


def _summaries(s: np.ndarray, v: np.ndarray, tile: int, flaw: str) -> np.ndarray:
    """Rabe & Staats' combination of per-tile summaries, with ``flaw``."""
    guarded = flaw not in UNGUARDED
    maxima, sums, values = [], [], []
    for cut in _tiles(s.shape[-1], tile, flaw == "last_tile_clamped"):
        m = s[..., cut].max(axis=-1, keepdims=True)  # (..., Lq, 1)
        p = _exp_against(s[..., cut], m, guarded)
        total = p.sum(axis=-1, keepdims=True)
        weighted = p @ v[..., cut, :]
        if flaw == "summaries_normalised_twice":
            weighted = weighted / np.where(total > 0, total, 1.0)
        maxima.append(m)
        sums.append(total)
        values.append(weighted)
    m_t, w_t, n_t = np.stack(maxima), np.stack(sums), np.stack(values)  # tile axis first
    if flaw == "maximum_over_heads":
        reference = m_t.max(axis=-3, keepdims=True)  # (tiles, B, 1, Lq, 1)
    else:
        reference = m_t.max(axis=0, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore"):
        if flaw == "summaries_not_rescaled":
            factor = np.ones_like(m_t)
        elif flaw.startswith("summaries_rescaled_inverted"):
            factor = np.exp(reference - m_t)
            if np.isinf(factor[np.isfinite(m_t)]).any():
                # tiles whose maxima lie so far apart that the inverted factor overflows:
                # its NaN would match any overflow of the output's (a softmax in 16 bits)
                raise ValueError("the inverted factor overflows between finite tiles")
        else:
            factor = np.exp(m_t - reference)
        if guarded:
            factor = np.where(np.isfinite(factor), factor, 0.0)
        numerator = (factor * n_t).sum(axis=0)
        denominator = (factor * w_t).sum(axis=0)
    return numerator / np.where(denominator == 0, 1.0, denominator)


def _running(s: np.ndarray, v: np.ndarray, tile: int, flaw: str) -> np.ndarray:
    """FlashAttention's loop over key tiles, with ``flaw``."""
    guarded = flaw not in UNGUARDED
    m = np.full((*s.shape[:-1], 1), -np.inf)
    total = np.zeros_like(m)
    acc = np.zeros((*s.shape[:-1], v.shape[-1]))
    for cut in _tiles(s.shape[-1], tile, clamped=False):
        block = s[..., cut]
        m_tile = block.max(axis=-1, keepdims=True)
        m_new = np.maximum(m, m_tile)
        p = _exp_against(block, m_tile if flaw == "tile_maximum" else m_new, guarded)
        alpha = _exp_against(m, m_new, guarded)
        weighted = p @ v[..., cut, :]
        row_sum = p.sum(axis=-1, keepdims=True)
        if flaw == "tile_normalised":
            weighted = weighted / np.where(row_sum > 0, row_sum, 1.0)
        with np.errstate(invalid="ignore"):
            total = (total if flaw == "sum_not_rescaled" else alpha * total) + row_sum
            acc = (acc if flaw == "accumulator_not_rescaled" else alpha * acc) + weighted
        m = m_new
    with np.errstate(invalid="ignore", divide="ignore"):
        return acc / np.where(total == 0, 1.0, total)


def _sdpa_tiled(tile: int, flaw: str) -> Callable[..., np.ndarray]:
    """§3.1's attention over key tiles of ``tile`` combined with ``flaw``; rows with no key
    kept follow the declared policy as in the spec (the flaws are about rows with keys)."""
    form = FLAWS[flaw][0]

    def sdpa(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):
        q, k, v = oracle._f64(q), oracle._f64(k), oracle._f64(v)
        lk = k.shape[-2]
        if lk <= tile:  # one tile: the spec's softmax
            raise ValueError(f"{lk} keys fill one tile of {tile}")
        s = _scores(q, k, scale)
        keep = np.ones(s.shape, dtype=bool)
        if keep_mask is not None:
            keep = np.broadcast_to(oracle.check_keep_mask(keep_mask, s.shape), s.shape)
        s = np.where(keep, s, -np.inf)
        if flaw == "maximum_over_heads" and (s.ndim < 4 or s.shape[-3] < 2):
            raise ValueError("no head axis (..., H, Lq, Lk) to take a maximum over")
        v = np.broadcast_to(v, (*s.shape[:-2], *v.shape[-2:]))
        out = (_summaries if form == "summaries" else _running)(s, v, tile, flaw)
        empty = ~keep.any(axis=-1)
        if empty.any():
            spec = oracle.scaled_dot_product_attention(
                q, k, v, keep_mask, scale=scale, fully_masked_rows=fully_masked_rows
            )
            out = np.where(empty[..., None], spec, out)
        return out

    return sdpa


def online_softmax_hypotheses(component: str) -> Iterator[Alternative]:
    """Each flaw of ``FLAWS`` at each tile size of ``KEY_TILES``, on every component whose
    oracle runs the attention core."""
    if not reaches(component, "scaled_dot_product_attention"):
        return
    for flaw, (form, words) in FLAWS.items():
        for tile in KEY_TILES:
            yield Alternative(
                registered(CODE),
                f"the output is the spec's attention computed over key tiles of {tile} "
                f"{_FORM_WORDS[form]} by a kernel that {words} (or the same with another tile "
                "size that cuts this call's keys alike); the tiles' combination must give "
                "softmax over all keys exactly (SPEC.md §3.1)",
                pieces={"scaled_dot_product_attention": _sdpa_tiled(tile, flaw)},
                nan="located" if flaw in UNGUARDED else "compare",
            )
