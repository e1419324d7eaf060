"""The tolerance rule (DESIGN.md, from FlashAttention's and PyTorch's kernel tests).

Inputs are rounded to the test dtype once and shared by every path; ``gold`` is the float64
oracle, ``ref`` a naive implementation in the test dtype, ``test`` the adapter. A check
passes iff ``max|test - gold| <= K * max|ref - gold| + floor``, where the floor scales with
the output's magnitude. NaN in ``test`` where ``gold`` has none fails outright.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

K_FORWARD = 3.0
# Relative floor per dtype, times max(1, max|gold|). For float64 the naive reference agrees
# with the oracle to ~1e-15, so the floor alone decides: 1e-10 is five orders above float64
# rounding in these small models, and five below the smallest deviation the suite hunts
# (a LayerNorm eps of 1e-5 against 1e-6 moves outputs by ~5e-6).
FLOOR = {"float64": 1e-10, "float32": 1e-5, "float16": 1e-2, "bfloat16": 5e-2}


@dataclass
class Comparison:
    passed: bool
    max_abs_err: float
    mean_abs_err: float
    bound: float
    ratio: float
    nan_mismatch: int  # positions where exactly one of test and gold is NaN
    worst_index: tuple[int, ...] | None

    def metrics(self) -> dict[str, Any]:
        return {
            "max_abs_err": self.max_abs_err,
            "mean_abs_err": self.mean_abs_err,
            "bound": self.bound,
            "ratio": self.ratio,
            "nan_mismatch": self.nan_mismatch,
            "worst_index": list(self.worst_index) if self.worst_index is not None else None,
        }


def compare(
    test: np.ndarray,
    gold: np.ndarray,
    *,
    dtype: str = "float64",
    ref_err: float = 0.0,
    k: float = K_FORWARD,
    ignore: np.ndarray | None = None,
) -> Comparison:
    """Apply the rule. ``ignore`` masks positions the spec leaves undefined (§4.4)."""
    test, gold = np.asarray(test, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    if test.shape != gold.shape:
        raise ValueError(f"shape {test.shape} is not the expected {gold.shape}")
    considered = (
        np.ones(gold.shape, bool) if ignore is None else ~np.broadcast_to(ignore, gold.shape)
    )
    test_nan, gold_nan = np.isnan(test) & considered, np.isnan(gold) & considered
    nan_mismatch = int((test_nan ^ gold_nan).sum())
    both = considered & ~test_nan & ~gold_nan
    err = np.where(both, np.abs(test - gold), 0.0)
    scale = float(np.abs(np.where(both, gold, 0.0)).max(initial=0.0))
    bound = k * ref_err + FLOOR[dtype] * max(1.0, scale)
    max_err = float(err.max(initial=0.0))
    if not np.isfinite(max_err):  # test is +-inf where gold is finite
        max_err = float("inf")
    mean_err = float(err[both].mean()) if both.any() else 0.0
    worst = (
        tuple(int(i) for i in np.unravel_index(int(err.argmax()), err.shape)) if err.size else None
    )
    if nan_mismatch:
        worst = tuple(int(i) for i in np.argwhere(test_nan ^ gold_nan)[0])
    ratio = max_err / bound if bound > 0 else float("inf")
    return Comparison(
        nan_mismatch == 0 and max_err <= bound, max_err, mean_err, bound, ratio, nan_mismatch, worst
    )
