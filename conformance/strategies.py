"""Hypothesis strategies and small helpers shared by the property checks.

In the spirit of array-api-tests' ``hypothesis_helpers.py`` (strategies in one module) and
``pytest_helpers.py`` (assertions that print the index and the values): every property
check draws its sizes and seeds here, and measures "did the output change?" with
``delta``, which applies the suite's tolerance rule (``tolerance.compare``) and keeps the
worst index and the two values found there for the failure message.

Property checks compare an implementation with *itself* (output with masked values changed
against output unchanged), so the float64 floor of the tolerance rule is the right bound:
exact equality is not promised by fused or reordered kernels, and a real dependence moves
outputs by many orders of magnitude more than 1e-10.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st

from tck.adapters import Unsupported
from tck.conformance.harness import Harness, Instance
from tck.conformance.inputs import Inputs, Shape
from tck.conformance.tolerance import compare
from tck.reference import param_shapes

# ------------------------------------------------------------------------------ strategies

seeds = st.integers(min_value=0, max_value=2**32 - 1)
"""A seed for ``np.random.default_rng``: hypothesis shrinks it, numpy makes the arrays."""

scales = st.sampled_from([1.0, 30.0])
"""Magnitude of perturbed values: ordinary, and large (a masked key must not matter however
large its score or value)."""


@st.composite
def padded_shapes(
    draw: st.DrawFn,
    *,
    self_attention: bool,
    min_len: int = 3,
    max_len: int = 9,
    max_batch: int = 3,
    min_lq: int = 1,
) -> Shape:
    """Sizes of one call with key padding in **every** batch row (SPEC.md §4.2).

    Each row keeps at least two keys (so a kept key's influence can be seen) and pads at
    least one; rows may differ in length. ``self_attention`` ties Lq to Lk.
    """
    batch = draw(st.integers(1, max_batch))
    lk = draw(st.integers(min_len, max_len))
    lq = lk if self_attention else draw(st.integers(min_lq, max_len))
    lengths = draw(st.lists(st.integers(2, lk - 1), min_size=batch, max_size=batch))
    return Shape(batch=batch, lq=lq, lk=lk, lengths=tuple(lengths))


@st.composite
def split_points(draw: st.DrawFn, *, min_len: int = 2, max_len: int = 12) -> tuple[int, int]:
    """(length, s) with 1 <= s < length: positions >= s are 'the future' of positions < s."""
    length = draw(st.integers(min_len, max_len))
    return length, draw(st.integers(1, length - 1))


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


# ------------------------------------------------------------------------------ instances

_INSTANCES: weakref.WeakKeyDictionary[Harness, dict[Any, Instance]] = weakref.WeakKeyDictionary()


def cached_instance(tck: Harness, key: Any, build: Callable[[], Instance]) -> Instance:
    """One instance per (check, subject, key) across hypothesis examples.

    Building (and loading params) per example would dominate the run time; reusing one
    instance across calls is also what users do, and a state leak between calls then
    shows up as a failure here too.
    """
    cache = _INSTANCES.setdefault(tck, {})
    if key not in cache:
        try:
            cache[key] = build()
        except Unsupported as why:
            # A fact of the subject (a dtype or device it lacks), not of this example: skip
            # now. Raised as Unsupported, hypothesis would shrink it as a failure (measured:
            # 40-75 s per check for a subject that does not offer float64).
            pytest.skip(str(why))
    return cache[key]


def zero_params(inst: Instance) -> dict[str, np.ndarray]:
    """Canonical parameter arrays of the instance's component, all zeros (to fill in)."""
    shapes = param_shapes(inst.component, inst.config, inst.conventions)
    return {name: np.zeros(shape) for name, shape in shapes.items()}


# ------------------------------------------------------------------------------ measuring


@dataclass(frozen=True)
class Delta:
    """How far two outputs of one implementation are apart, where it is worst."""

    max_abs: float  # max |after - before| over the compared positions (inf for a NaN flip)
    bound: float  # the tolerance rule's float64 floor at this magnitude
    index: tuple[int, ...] | None  # where it is worst
    before: float
    after: float

    @property
    def changed(self) -> bool:
        return not (self.max_abs <= self.bound)

    def describe(self) -> str:
        if self.index is None:
            return "no position compared"
        return (
            f"max |delta| = {self.max_abs:.3g} (bound {self.bound:.3g}) at index "
            f"{list(self.index)}: {self.before:.6g} -> {self.after:.6g}"
        )

    def metrics(self, prefix: str = "") -> dict[str, Any]:
        return {
            f"{prefix}max_abs_delta": self.max_abs,
            # where nothing moved, "where" is an arbitrary first index: none is recorded
            f"{prefix}delta_index": list(self.index) if self.index and self.max_abs else None,
        }


def delta(before: np.ndarray, after: np.ndarray, where: np.ndarray | None = None) -> Delta:
    """Compare ``after`` with ``before`` on the positions ``where`` is True (broadcast).

    NaN in both counts as equal (a NaN row that stays NaN has not changed); NaN in one only
    counts as an infinite change.
    """
    before, after = np.asarray(before, np.float64), np.asarray(after, np.float64)
    if before.shape != after.shape:
        raise ValueError(f"outputs of shape {before.shape} and {after.shape} cannot be compared")
    ignore = None if where is None else ~np.broadcast_to(where, before.shape)
    result = compare(after, before, ignore=ignore)
    max_abs = math.inf if result.nan_mismatch else result.max_abs_err
    index = result.worst_index
    considered = np.ones(before.shape, bool) if where is None else ~ignore
    if index is not None and not considered[index]:  # nothing moved: show a compared place
        first = np.argwhere(considered)
        index = tuple(int(i) for i in first[0]) if len(first) else None
    b = float(before[index]) if index is not None else math.nan
    a = float(after[index]) if index is not None else math.nan
    return Delta(max_abs, result.bound, index, b, a)


def require_deterministic(
    tck: Harness, inst: Instance, inputs: Mapping[str, np.ndarray], out: np.ndarray
) -> None:
    """Skip a property whose violation may only be randomness: when two identical calls
    already differ, every self-comparison does, and blocks.eval_determinism names it."""
    again = delta(out, tck.run(inst, inputs))
    if again.changed:
        pytest.skip(
            f"two identical calls differ ({again.describe()}), so this property cannot be "
            "judged; see blocks.eval_determinism (SPEC.md §10.1)"
        )


def note_worst(tck: Harness, found: Delta, prefix: str = "") -> None:
    """Record ``found`` unless an earlier example (hypothesis runs many) moved more."""
    old = tck.record.metrics.get(f"{prefix}max_abs_delta")
    if old is None or not (found.max_abs <= old):
        tck.note(found.metrics(prefix))


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
