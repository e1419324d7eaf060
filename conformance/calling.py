"""Calling an adapter so that nothing it does besides its output changes a verdict.

The adapter gets private copies of the inputs and the check a private copy of the output:
an adapter that writes into its inputs or reuses its output buffer changes no verdict;
either is recorded as a side effect (``adapter.input_modified``, ``adapter.output_reused``),
which the plugin reports beside the verdict. An output that is not a floating array of at
least one dimension fails the check (SPEC.md §10.6).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .recorder import Recorder
from .results import CheckFailure


def guarded_run(
    run: Callable[[Any, dict[str, Any]], Any],
    handle: Any,
    inputs: Mapping[str, np.ndarray],
    record: Recorder,
    outputs: list[np.ndarray],
) -> np.ndarray:
    """``run(handle, copies of inputs)``, checked; ``outputs`` holds the last few outputs
    as returned (updated here), to find a reused buffer."""
    private = {k: private_copy(v) for k, v in inputs.items()}
    out = run(handle, private)
    changed = [k for k in inputs if k not in private or not _same(private[k], inputs[k])]
    if changed:
        record.side_effects["adapter.input_modified"] = (
            f"run() changed its input(s) {', '.join(map(repr, changed))} in place; an "
            "implementation must leave its inputs as they were (the checks compared "
            "with unchanged copies)."
        )
    if not isinstance(out, np.ndarray):
        raise CheckFailure(
            "adapter.output_not_array",
            f"run() returned {type(out).__name__}, not a numpy array",
        )
    if not np.issubdtype(out.dtype, np.floating):
        raise CheckFailure("adapter.output_not_float", f"run() returned dtype {out.dtype}")
    if out.ndim == 0:
        raise CheckFailure(
            "shape.wrong_output_shape",
            "run() returned a 0-d array (a scalar), not the spec's output shape (SPEC.md §10.6)",
            {"shape": []},
        )
    if any(out is old or _overlap(out, old) for old in outputs):
        record.side_effects["adapter.output_reused"] = (
            "run() returned memory it had returned before (a reused output buffer): a "
            "caller's earlier output changes under it; return a fresh array per call "
            "(the checks compared private copies)."
        )
    outputs[:] = [*outputs[-3:], out]  # the last few: a reused one is among them
    return np.array(out, copy=True)


def private_copy(value: Any) -> Any:
    """A copy of an input the adapter may do anything with."""
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=10_000))
    except Exception:
        return True


def _same(a: Any, b: Any) -> bool:
    """Bit for bit the same array (NaN included), or the same other value."""
    if isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and a.tobytes() == b.tobytes()
        )
    return a is b
