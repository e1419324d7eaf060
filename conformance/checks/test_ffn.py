"""§6 Feed-forward network: applied to each position separately and identically; §6.3 its
activation, to each element.

No parameters needed: the checks compare the FFN with itself under permutations and
changes of other positions.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tck.conformance.toolkit.deltas import delta, note_worst, require_deterministic
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.input_edits import rng
from tck.conformance.toolkit.instances import cached_instance
from tck.conformance.toolkit.results import CheckFailure
from tck.conformance.toolkit.strategies import seeds

spec = pytest.mark.spec
components = pytest.mark.components


@spec("6.2", "10.2", id="ffn.position_wise")
@components("ffn")
@given(seed=seeds, batch=st.integers(1, 3), length=st.integers(2, 9))
def test_position_wise(tck: Harness, seed: int, batch: int, length: int) -> None:
    """§6.2: FFN(X)[b, t] = FFN(X[b, t]): permuting positions permutes the outputs, and
    changing position t' leaves every other position (and batch row, §10.2) unchanged."""
    inst = cached_instance(tck, "default", tck.own_instance)
    generator = rng(seed)
    x = generator.standard_normal((batch, length, inst.config.d_model)) * 2.0
    out = tck.run(inst, {"x": x})
    require_deterministic(tck, inst, {"x": x}, out)  # an FFN call is cheap
    order = generator.permutation(length)
    found = delta(out[:, order], tck.run(inst, {"x": x[:, order]}))
    note_worst(tck, found)
    if found.changed:
        raise CheckFailure(
            "ffn.not_position_wise",
            f"permuting the positions by {order.tolist()} does not permute the output the "
            f"same way: {found.describe()} (SPEC.md §6.2)",
            found.metrics(),
        )
    b, t = int(generator.integers(batch)), int(generator.integers(length))
    changed = x.copy()
    changed[b, t] = generator.standard_normal(x.shape[-1]) * 3.0
    others = np.ones((batch, length, 1), bool)
    others[b, t] = False
    found = delta(out, tck.run(inst, {"x": changed}), others)
    note_worst(tck, found)
    if found.changed:
        code = "ffn.not_position_wise"
        moved_row = found.index is not None and found.index[0] != b
        if moved_row:
            code = "batch.rows_interact"
        raise CheckFailure(
            code,
            f"changing x[{b}, {t}] changes the output at another "
            f"{'batch row' if moved_row else 'position'}: {found.describe()} "
            "(SPEC.md §6.2, §10.2)",
            found.metrics(),
        )


@spec("6.3", "10.2", id="ffn.activation_elementwise")
@components("activation")
@given(seed=seeds, batch=st.integers(1, 3), length=st.integers(1, 9))
def test_activation_elementwise(tck: Harness, seed: int, batch: int, length: int) -> None:
    """§6.3: act(X)[b, t, d] = act(X[b, t, d]): changing one element leaves every other
    element of the output (other features, positions and batch rows) unchanged."""
    inst = cached_instance(tck, "default", tck.own_instance)
    generator = rng(seed)
    x = generator.standard_normal((batch, length, inst.config.d_model)) * 2.0
    out = tck.run(inst, {"x": x})
    b, t = int(generator.integers(batch)), int(generator.integers(length))
    d = int(generator.integers(x.shape[-1]))
    changed = x.copy()
    changed[b, t, d] += 3.0
    others = np.ones(x.shape, bool)
    others[b, t, d] = False
    found = delta(out, tck.run(inst, {"x": changed}), others)
    note_worst(tck, found)
    if found.changed:
        moved_row = found.index is not None and found.index[0] != b
        raise CheckFailure(
            "batch.rows_interact" if moved_row else "ffn.not_elementwise",
            f"changing x[{b}, {t}, {d}] changes the output at another "
            f"{'batch row' if moved_row else 'element'}: {found.describe()} "
            "(SPEC.md §6.3, §10.2)",
            found.metrics(),
        )
