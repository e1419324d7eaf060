"""What one check found besides its verdict: a ``Recorder`` per check, which the plugin
creates, the harness and the check write to, and the plugin reads back into the check's
result (results.json).

It holds the worst value of each metric across calls (hypothesis runs a check many times),
one entry per oracle comparison (the report's error-vs-length plot, SPEC.md §10.11), the
comparison that failed with what replays it (the repro snippet), the declared deviations a
check observed (a ``convention`` result), what the adapter did besides its output (side
effects: found beside the verdict, never in it), and the clauses the check measured when
they are fewer than its ``@spec`` marker lists (one component's, one field's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tck.reference.inputs import Shape

# Metrics whose worst (largest) value across calls is kept.
WORST_OF = ("max_abs_err", "ratio", "nan_mismatch", "mean_abs_err", "ref_multiple")


@dataclass
class FailedCall:
    """An oracle comparison that failed: the instance, the exact inputs and what they were."""

    inst: Any  # tck.conformance.toolkit.harness.Instance
    inputs: dict[str, np.ndarray]
    what: str
    recipe: tuple[Shape, int] | None = None  # (shape, seed) if made by Harness.inputs


@dataclass
class Recorder:
    """One check's findings, beside its verdict."""

    metrics: dict[str, Any] = field(default_factory=dict)
    calls: list[dict[str, Any]] = field(default_factory=list)  # one per oracle comparison
    failed_call: FailedCall | None = None
    conventions: list[tuple[str, str]] = field(default_factory=list)  # (code, message)
    side_effects: dict[str, str] = field(default_factory=dict)  # code -> words
    clauses: list[str] | None = None  # what the check measured, if narrower than its marker
    # declared conventions the check could not exercise at any size the subject takes
    # (SPEC.md §10.11): a pass that leaves one unmeasured is reported unverified
    unmeasured: list[str] = field(default_factory=list)

    def note(self, metrics: Mapping[str, Any]) -> None:
        """Keep the worst value of each metric across calls (hypothesis runs many)."""
        for key, value in metrics.items():
            old = self.metrics.get(key)
            if isinstance(value, (int, float)) and isinstance(old, (int, float)):
                if key in WORST_OF or key.endswith("max_abs_delta"):
                    self.metrics[key] = max(old, value)
                    if key == "ratio" and value >= old:
                        self.metrics["worst_index"] = metrics.get("worst_index")
                        self.metrics["bound"] = metrics.get("bound")
                continue
            if old is None or key not in ("worst_index", "bound"):
                self.metrics[key] = value

    def convention(self, code: str, message: str) -> None:
        """An observed, declared deviation from the canonical spec."""
        self.conventions.append((code, message))

    def measured(self, *clauses: str) -> None:
        """The SPEC clauses this run of the check measured (its marker lists every clause
        it can measure: an oracle check's for every component, a probe's for every field)."""
        self.clauses = list(clauses)


def seq_len(inputs: Mapping[str, np.ndarray]) -> int | None:
    """The sequence length of a call (queries / targets), or None for images."""
    if "positions" in inputs:  # sinusoidal_pe, rope (whose x is [B, H, L, d])
        return int(np.size(inputs["positions"]))
    for name, axis in (("q", -2), ("query", 1), ("x", 1), ("tgt_ids", 1), ("ids", 1)):
        if name in inputs and np.ndim(inputs[name]) >= 2:
            return int(np.shape(inputs[name])[axis])
    return None
