"""A tiled (online) softmax that combines its key tiles wrongly is named as such
(hypotheses_online.online_softmax_hypotheses), and a tiled softmax that combines them right is
never taken for one.

The buggy kernels here are written in the test, key by key rather than tile by tile where
the algorithm allows, independently of the hypotheses' own tiled forms."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from test_hypotheses_by_piece import _explained_on

from tck.conformance.diagnosis import hypotheses_online as online
from tck.conformance.diagnosis.alternatives import Alternative
from tck.reference import oracle


def _inputs(seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(2, 3, 7, 4)) * 3
    k = rng.normal(size=(2, 3, 11, 4)) * 3
    v = rng.normal(size=(2, 3, 11, 5))
    keep = rng.random((2, 1, 7, 11)) > 0.3
    keep[0, 0, 2] = False  # a row with no key: the declared policy's row
    keep[1, 0, :, 8:] = False  # a last tile of 4 with every key masked
    keep[0, 0, 5, :4], keep[0, 0, 5, 4] = False, True  # a first tile masked, a key after it
    return q, k, v, keep


@pytest.mark.parametrize("form", [online._summaries, online._running])
@pytest.mark.parametrize("tile", [1, 2, 4, 8])
def test_the_tiled_forms_without_a_flaw_are_the_spec(form: Any, tile: int) -> None:
    # the hypotheses' two combinations, correct, reproduce §3.1 on every kept row (to the
    # float64 rounding of a few dozen operations): a flaw is then the only difference
    q, k, v, keep = _inputs()
    spec = oracle.scaled_dot_product_attention(q, k, v, keep)
    s = np.where(np.broadcast_to(keep, (2, 3, 7, 11)), q @ np.swapaxes(k, -1, -2) / 2, -np.inf)
    out = form(s, v, tile, "none")
    rows = np.broadcast_to(keep, s.shape).any(axis=-1)
    assert np.max(np.abs(out - spec)[rows]) < 1e-12


@pytest.mark.parametrize("flaw", sorted(online.FLAWS))
def test_every_flaw_changes_some_output(flaw: str) -> None:
    q, k, v, keep = _inputs()
    spec = oracle.scaled_dot_product_attention(q, k, v, keep)
    out = online._sdpa_tiled(4, flaw)(q, k, v, keep)
    differs = np.isnan(out) != np.isnan(spec)
    with np.errstate(invalid="ignore"):
        differs |= np.abs(out - spec) > 1e-6
    assert differs.any(), flaw


def _by_hand(flaw: str, tile: int = 2) -> dict[str, Any]:
    """§3.1 by a tiled kernel written here, with ``flaw``: "inverted" (per-tile summaries
    rescaled by exp(M - m_t)), "normalised" (a running loop adding each tile's values over the
    tile's own sum), "heads" (summaries rescaled to the maximum over the heads)."""

    def sdpa(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
        q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        scores = q @ np.swapaxes(k, -1, -2) * scale
        keep = np.ones(scores.shape, bool) if keep_mask is None else keep_mask
        keep = np.broadcast_to(keep, scores.shape)
        lk = scores.shape[-1]
        parts = []
        for start in range(0, lk, tile):
            s = scores[..., start : start + tile]
            kept = keep[..., start : start + tile]
            m = np.where(kept, s, -1e300).max(axis=-1, keepdims=True)
            e = np.where(kept, np.exp(np.minimum(s - m, 0.0)), 0.0)
            parts.append((m, e.sum(axis=-1, keepdims=True), e @ v[..., start : start + tile, :]))
        if flaw == "normalised":  # a running loop
            run_m = np.full(parts[0][0].shape, -1e300)
            total, acc = np.zeros_like(run_m), 0.0
            for m, w, n in parts:
                new = np.maximum(run_m, m)
                total = total * np.exp(run_m - new) + w * np.exp(m - new)
                acc = acc * np.exp(run_m - new) + n / np.where(w > 0, w, 1.0)
                run_m = new
            out = acc / np.where(total > 0, total, 1.0)
        else:
            maxima = np.stack([p[0] for p in parts])
            top = maxima.max(axis=-3, keepdims=True) if flaw == "heads" else maxima.max(axis=0)
            with np.errstate(over="ignore"):
                factor = np.exp(top - maxima) if flaw == "inverted" else np.exp(maxima - top)
            factor = np.where(maxima <= -1e299, 0.0, np.minimum(factor, 1e300))
            num = sum(f * p[2] for f, p in zip(factor, parts, strict=True))
            den = sum(f * p[1] for f, p in zip(factor, parts, strict=True))
            out = num / np.where(den > 0, den, 1.0)
        spec = oracle.scaled_dot_product_attention(
            q, k, v, keep_mask, scale=scale, fully_masked_rows=fully_masked_rows
        )
        return np.where(keep.any(axis=-1)[..., None], out, spec)

    return {"scaled_dot_product_attention": sdpa}


@pytest.mark.parametrize("name", ["mha", "encoder_layer", "causal_self_attention"])
@pytest.mark.parametrize("flaw", ["inverted", "normalised", "heads"])
def test_a_tiled_softmax_combined_wrongly_is_named(name: str, flaw: str) -> None:
    code, message = _explained_on(name, Alternative("", "", pieces=_by_hand(flaw)))
    assert code == "attention.online_softmax_wrong", message
