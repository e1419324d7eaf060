"""Inputs a property check makes from other inputs: a generator from a drawn seed, fresh
values at chosen positions (``perturb``), one batch row (``batch_slice``) and a row
selection shaped for an output (``rows_where``)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tck.reference.inputs import Inputs


def rng(seed: int) -> np.random.Generator:
    """numpy's generator for a seed hypothesis drew (``strategies.seeds``)."""
    return np.random.default_rng(seed)


def perturb(
    inputs: Mapping[str, np.ndarray],
    names: tuple[str, ...],
    axis: int,
    where: np.ndarray,
    rng: np.random.Generator,
    scale: float = 1.0,
    *,
    tied: bool = False,
) -> Inputs:
    """A copy of ``inputs`` with fresh random values in ``names`` at the (batch, position)
    pairs where ``where`` [B, L] is True; ``axis`` is the position axis of those arrays.
    ``tied``: one draw for every name, so that inputs passed as one tensor (self-attention
    query = key = value) stay one tensor."""
    out = dict(inputs)
    where = np.asarray(where, bool)
    fresh = None
    for name in names:
        array = np.asarray(inputs[name], np.float64)
        index = [slice(None)] + [None] * (array.ndim - 1)
        index[axis] = slice(None)
        selector = where[tuple(index)]  # [B, 1.., L, 1..] broadcasting over the other axes
        if fresh is None or not tied:
            fresh = rng.standard_normal(array.shape) * scale
        out[name] = np.where(selector, fresh, array)
    return out


def rows_where(rows: np.ndarray, out_ndim: int, axis: int) -> np.ndarray:
    """A [B, L] selection of query rows, shaped to broadcast over an output whose query
    axis is ``axis`` (1 for [B, L, D], 2 for [B, H, L, d])."""
    index = [slice(None)] + [None] * (out_ndim - 1)
    index[axis] = slice(None)
    return np.asarray(rows, bool)[tuple(index)]


def batch_slice(inputs: Mapping[str, np.ndarray], b: int) -> Inputs:
    """Row ``b`` of every batched input, keeping the batch axis (length 1).

    0-d flags (``causal``), shared ``attn_mask`` [Lq, Lk] and ``positions`` have no batch
    axis and pass unchanged.
    """
    out: Inputs = {}
    for name, value in inputs.items():
        value = np.asarray(value)
        unbatched = value.ndim == 0 or name in ("attn_mask", "positions")
        out[name] = value if unbatched else value[b : b + 1]
    return out
