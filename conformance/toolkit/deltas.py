"""Did the output change? Property checks compare an implementation with *itself* (output
with masked values changed against output unchanged) and measure the change with ``delta``,
which applies the suite's tolerance rule (``tolerance.compare``) and keeps the worst index
and the two values found there for the failure message (in the spirit of array-api-tests'
``pytest_helpers.py``: assertions that print the index and the values).

The float64 floor of the tolerance rule is the right bound here: exact equality is not
promised by fused or reordered kernels, and a real dependence moves outputs by many orders
of magnitude more than 1e-10.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tck.conformance.toolkit.harness import Harness, Instance
from tck.conformance.toolkit.results import CheckFailure
from tck.reference.tolerance import compare


@dataclass(frozen=True)
class Delta:
    """How far two outputs of one implementation are apart, where it is worst."""

    max_abs: float  # max |after - before| over the compared positions (inf for a NaN flip)
    bound: float  # the tolerance rule's float64 floor at this magnitude
    index: tuple[int, ...] | None  # where it is worst
    before: float
    after: float
    # NaN or inf at the positions ``delta(real=)`` requires finite, in before and in after
    nonfinite_before: int = 0
    nonfinite_after: int = 0

    @property
    def nonfinite(self) -> bool:
        return bool(self.nonfinite_before or self.nonfinite_after)

    @property
    def changed(self) -> bool:
        return self.nonfinite or not (self.max_abs <= self.bound)

    def describe(self) -> str:
        if self.index is None:
            return "no position compared"
        if self.nonfinite:
            return (
                f"{self.nonfinite_before} real position(s) are NaN or inf before and "
                f"{self.nonfinite_after} after (first at index {list(self.index)}: "
                f"{self.before:.6g} -> {self.after:.6g}); a non-finite value on both sides is "
                "not agreement"
            )
        return (
            f"max |delta| = {self.max_abs:.3g} (bound {self.bound:.3g}) at index "
            f"{list(self.index)}: {self.before:.6g} -> {self.after:.6g}"
        )

    def metrics(self, prefix: str = "") -> dict[str, Any]:
        out = {
            f"{prefix}max_abs_delta": self.max_abs,
            # where nothing moved, "where" is an arbitrary first index: none is recorded
            f"{prefix}delta_index": list(self.index) if self.index and self.max_abs else None,
        }
        if self.nonfinite:
            out[f"{prefix}nonfinite"] = self.nonfinite_before + self.nonfinite_after
            out[f"{prefix}delta_index"] = list(self.index) if self.index else None
        return out


def delta(
    before: np.ndarray,
    after: np.ndarray,
    where: np.ndarray | None = None,
    *,
    real: np.ndarray | bool = False,
) -> Delta:
    """Compare ``after`` with ``before`` on the positions ``where`` is True (broadcast).

    At the positions ``real`` marks (True: all; a mask broadcast to the shape), both must
    be finite: a NaN or inf there is a change (``Delta.nonfinite``), since the same NaN on
    both sides says nothing about whether the two calls agree. Elsewhere NaN in both counts
    as equal (a fully masked row declared NaN that stays NaN has not changed) and NaN in one
    only as an infinite change. The bound is the floor of the tolerance rule in the coarser
    dtype of the two outputs (``dtype_of``).
    """
    dtype = dtype_of(before, after)
    before, after = np.asarray(before, np.float64), np.asarray(after, np.float64)
    if before.shape != after.shape:  # the subject's own two outputs: its shapes are wrong
        raise CheckFailure(
            "shape.wrong_output_shape",
            f"outputs of shape {before.shape} and {after.shape} where the spec's two calls "
            "give one shape per row: the output's shape depends on what it should not (a batch "
            "axis read as another; SPEC.md §10.6)",
            {"shape": list(after.shape), "expected_shape": list(before.shape)},
        )
    ignore = None if where is None else ~np.broadcast_to(where, before.shape)
    result = compare(after, before, dtype=dtype, ignore=ignore, require_finite=real)
    max_abs = math.inf if result.nan_mismatch else result.max_abs_err
    index = result.worst_index
    considered = np.ones(before.shape, bool) if where is None else ~ignore
    if index is not None and not considered[index]:  # nothing moved: show a compared place
        first = np.argwhere(considered)
        index = tuple(int(i) for i in first[0]) if len(first) else None
    b = float(before[index]) if index is not None else math.nan
    a = float(after[index]) if index is not None else math.nan
    return Delta(max_abs, result.bound, index, b, a, result.nonfinite_gold, result.nonfinite_test)


def dtype_of(*outputs: np.ndarray) -> str:
    """The coarsest floating dtype among ``outputs`` as the tolerance rule names it: an
    implementation run in float32 (an ONNX graph, a model offered in float32 only) is held
    to float32's floor when compared with itself, a float64 one to float64's."""
    names = {np.dtype(getattr(o, "dtype", np.float64)).name for o in outputs}
    for name in ("float16", "bfloat16", "float32"):
        if name in names:
            return name
    return "float64"


def real_positions(inputs: Mapping[str, np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """The positions of an output of ``shape`` that belong to real tokens: all of them, but
    the padded query rows of a self-attention subject (``key_padding`` of the output's
    (batch, length)), whose outputs SPEC.md §4.4 and §11.7 do not promise."""
    keep = inputs.get("key_padding")
    if keep is None or len(shape) < 2 or np.shape(keep) != tuple(shape[:2]):
        return np.ones(shape, bool)
    keep = np.asarray(keep, bool)
    return np.broadcast_to(keep.reshape(keep.shape + (1,) * (len(shape) - 2)), shape)


def require_finite(found: Delta, what: str) -> None:
    """Fail with ``numerics.nonfinite_output`` when ``found`` met a NaN or inf at a real
    position (SPEC.md §10.7): the comparison ``what`` cannot say the calls agree."""
    if found.nonfinite:
        raise CheckFailure(
            "numerics.nonfinite_output",
            f"{what}: {found.describe()}; the output is not finite at real positions, so the "
            "comparison proves nothing (SPEC.md §10.7)",
            found.metrics(),
        )


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
