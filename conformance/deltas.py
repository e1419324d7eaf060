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

from tck.conformance.harness import Harness, Instance
from tck.reference.tolerance import compare


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
