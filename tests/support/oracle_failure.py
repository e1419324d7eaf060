"""The first oracle comparison of an adapter's first subject, expected to fail: the diagnosis
a hypothesis gives a mutant, as the suite's equality check would report it."""

from __future__ import annotations

import pytest

from tck.adapters import load_adapter
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure
from tck.reference.inputs import Shape


def first_oracle_failure(adapter: str) -> CheckFailure:
    """The failure of ``adapter``'s first subject on the default call; the hypothesis that
    named it must be the one recorded as reproducing the output."""
    subject = load_adapter(adapter).subjects()[0]
    tck = Harness(load_adapter(adapter), subject, seed=0)
    inst = tck.instance()
    inputs = tck.inputs(inst, Shape())
    with pytest.raises(CheckFailure) as failure:
        tck.assert_matches_oracle(inst, inputs)
    assert tck.record.metrics.get("reproduced_by") == failure.value.code
    return failure.value
