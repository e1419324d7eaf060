"""Oracle equality: every subject against the float64 oracle, on inputs where bugs hide.

One instance serves every call of a check, so state kept between calls (caches, buffers
sized by the first call) shows up as a mismatch on a later one.
"""

from __future__ import annotations

import numpy as np
import pytest

from tck.adapters import Unsupported
from tck.conformance.toolkit.harness import Harness
from tck.reference import RECORDS, select
from tck.reference.inputs import Shape

spec = pytest.mark.spec

# The clauses an oracle-equality pass of each component vouches for (its record's clauses).
CLAUSES = {name: rec.clauses for name, rec in RECORDS.items()}

# Shapes every component is run on, in order, through one instance.
SHAPES = (
    Shape(),  # batch 2, rows of different length, Lq != Lk
    Shape(batch=3, lq=3, lk=1, lengths=(1, 1, 1)),  # a single key
    Shape(batch=1, lq=1, lk=3, masked=False),  # a single query, no mask
    Shape(batch=2, lq=13, lk=13, causal=True),  # causal (for components that take it)
    Shape(batch=2, lq=6, lk=11, magnitude=30.0),  # large scores: softmax saturates
)
LONG = Shape(batch=2, lq=113, lk=113)  # not a multiple of 8, 16 or 64
# Causal with no padding at all: a causal mask measured on its own (SPEC.md §10.11).
CAUSAL_UNPADDED = Shape(batch=2, lq=9, lk=9, masked=False, causal=True)
CALLS = (*SHAPES, LONG, CAUSAL_UNPADDED)


@spec(*sorted({c for cs in CLAUSES.values() for c in cs}), "10.11", id="equality.oracle")
def test_oracle(tck: Harness) -> None:
    tck.record.measured(*CLAUSES[tck.component], "10.11")
    inst = tck.instance()
    tck.require_params(inst)
    unsupported = []
    for index, shape in enumerate(CALLS):
        if RECORDS[tck.component].has("fixed_magnitude") and shape.magnitude != 1.0:
            continue
        inputs = tck.inputs(inst, shape, seed=index)
        try:
            tck.assert_matches_oracle(inst, inputs, what=f"call {index + 1} ({_describe(shape)})")
        except Unsupported as why:  # this call only: the other shapes still count
            unsupported.append(f"{_describe(shape)}: {why}")
    full = _real_length(tck)
    if full is not None:  # a checkpoint's own length (512 for BERT-base): once, one row
        shape = Shape(batch=1, lq=full, lk=full)
        inputs = tck.inputs(inst, shape, seed=len(CALLS))
        try:
            # a real-size language model: judged layer by layer where its adapter records
            # the layers (tck.conformance.toolkit.teacher), else by the whole comparison
            what = f"full length ({_describe(shape)})"
            tck.assert_matches_oracle(inst, inputs, what=what, by_layer=True)
        except Unsupported as why:
            unsupported.append(f"{_describe(shape)}: {why}")
        tck.note({"full_length": full})
    if unsupported:
        tck.note({"unsupported_calls": unsupported})
    if len(unsupported) == len(CALLS) + (full is not None):
        pytest.skip("; ".join(unsupported))


@spec("5.1", "5.2", "5.3", "5.4", id="equality.low_variance_rows")
@pytest.mark.components(*select("norm"))
def test_low_variance_rows(tck: Harness) -> None:
    """Rows whose variance is near eps: where eps and its placement decide the output."""
    inst = tck.instance()
    rng = np.random.default_rng(tck.seed)
    x = rng.standard_normal((3, 4, inst.config.d_model))
    x = x * np.array([1.0, 1e-3, 1e-5])[:, None, None] + 5.0  # variance 1, 1e-6, 1e-10
    tck.assert_matches_oracle(inst, {"x": x}, what="low-variance rows")


def _real_length(tck: Harness) -> int | None:
    """The length a checkpoint checked as it is runs at (``real_length`` of its adapter,
    e.g. 512 for BERT-base): None for adapters that build subjects at the suite's sizes."""
    real_length = getattr(tck.adapter, "real_length", None)
    return real_length(tck.subject) if callable(real_length) else None


def _describe(shape: Shape) -> str:
    parts = [f"B={shape.batch}", f"Lq={shape.lq}", f"Lk={shape.lk}"]
    if shape.causal:
        parts.append("causal")
    if not shape.masked:
        parts.append("no mask")
    if shape.magnitude != 1.0:
        parts.append(f"inputs x{shape.magnitude:g}")
    return ", ".join(parts)
