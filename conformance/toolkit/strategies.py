"""Hypothesis strategies shared by the property checks: every property check draws its
sizes and seeds here (in the spirit of array-api-tests' ``hypothesis_helpers.py``).

The helpers that are not strategies live beside it: ``tck.conformance.toolkit.instances`` (one
instance reused across examples, zeroed parameters), ``tck.conformance.toolkit.deltas`` (did the
output change?) and ``tck.conformance.toolkit.input_edits`` (inputs made from other inputs).
"""

from __future__ import annotations

from hypothesis import strategies as st

from tck.conformance.toolkit.spaces import length_cap, too_short
from tck.reference.inputs import Shape

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
    max_len = length_cap(max_len)  # the subject's ConfigSpace.max_len, when shorter
    too_short(min_len, max_len)
    lk = draw(st.integers(min_len, max_len))
    lq = lk if self_attention else draw(st.integers(min_lq, max_len))
    lengths = draw(st.lists(st.integers(2, lk - 1), min_size=batch, max_size=batch))
    return Shape(batch=batch, lq=lq, lk=lk, lengths=tuple(lengths))


@st.composite
def split_points(draw: st.DrawFn, *, min_len: int = 2, max_len: int = 12) -> tuple[int, int]:
    """(length, s) with 1 <= s < length: positions >= s are 'the future' of positions < s."""
    max_len = length_cap(max_len)  # the subject's ConfigSpace.max_len, when shorter
    too_short(min_len, max_len)
    length = draw(st.integers(min_len, max_len))
    return length, draw(st.integers(1, length - 1))
