"""The Recorder: what one check finds besides its verdict, owned by the plugin, written by
the harness and the check (tck.conformance.toolkit.recorder)."""

from __future__ import annotations

import numpy as np
import pytest

from tck.adapters import load_adapter
from tck.conformance.toolkit.calling import guarded_run
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.recorder import Recorder
from tck.conformance.toolkit.results import CheckFailure


def test_note_keeps_the_worst_of_each_metric_and_its_index():
    record = Recorder()
    record.note({"ratio": 0.5, "worst_index": [0], "bound": 1.0, "field": "eps"})
    record.note({"ratio": 0.9, "worst_index": [3], "bound": 2.0, "field": "variance"})
    record.note({"ratio": 0.1, "worst_index": [7], "bound": 3.0})
    assert record.metrics == {"ratio": 0.9, "worst_index": [3], "bound": 2.0, "field": "variance"}


def test_measured_clauses_and_conventions_are_recorded():
    record = Recorder()
    assert record.clauses is None
    record.measured("0.3", "5.2")
    record.convention("convention.eps", "declared")
    assert record.clauses == ["0.3", "5.2"] and record.conventions == [
        ("convention.eps", "declared")
    ]


def test_the_harness_writes_to_the_recorder_it_is_given():
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == "layer_norm")
    record = Recorder()
    tck = Harness(adapter, subject, record=record)
    inst = tck.instance()
    tck.assert_matches_oracle(inst, tck.inputs(inst), what="call")
    assert [c["what"] for c in record.calls] == ["call"] and record.calls[0]["passed"]
    assert "max_abs_err" in record.metrics and record.failed_call is None


def test_a_guarded_run_records_side_effects_and_hands_back_copies():
    record, outputs = Recorder(), []
    buffer = np.zeros(3)

    def scribbling(handle, inputs):
        inputs["x"][0] = 99.0  # changes its (private) input
        return buffer  # and returns the same buffer every call

    x = np.ones(3)
    first = guarded_run(scribbling, None, {"x": x}, record, outputs)
    guarded_run(scribbling, None, {"x": x}, record, outputs)
    assert x[0] == 1.0 and first is not buffer
    assert set(record.side_effects) == {"adapter.input_modified", "adapter.output_reused"}
    with pytest.raises(CheckFailure, match="not a numpy array"):
        guarded_run(lambda h, i: [1.0], None, {}, record, outputs)


def test_a_property_failing_in_several_ways_is_recorded_as_its_first_check_failure():
    """hypothesis raises an exception group when a property fails in distinct ways; the row
    is that check's failure with its code, not an adapter crash."""
    import builtins

    from tck.conformance.runner.plugin import _leading

    # the builtin from 3.11; hypothesis raises the backport's on 3.10
    group_of = getattr(builtins, "ExceptionGroup", None)
    if group_of is None:
        group_of = pytest.importorskip("exceptiongroup").ExceptionGroup
    first = CheckFailure("rope.not_relative", "the score depends on m and n", {})
    other = ValueError("not a check's")
    group = group_of("Hypothesis found 2 distinct failures.", [other, first])
    assert _leading(group) is first
    assert _leading(group_of("nested", [group_of("inner", [first])])) is first
    assert _leading(group_of("no check failure", [other])) is other
    assert _leading(other) is other
