"""The grad guard (conformance/toolkit/calling.py): two parameters whose gradients share memory
within one call are one tensor in the implementation (layers cloned by reference, tied
weights), which the parameter checks name; only memory returned again by a later call is a
reused output buffer (``adapter.output_reused``)."""

from __future__ import annotations

import numpy as np

from tck.conformance.toolkit.calling import GuardedAdapter
from tck.conformance.toolkit.recorder import Recorder


class SharedLayers:
    """Two layers' weights that are one tensor: one gradient under both names."""

    name = "shared-layers"

    def __init__(self, reuse: bool) -> None:
        self.reuse, self.buffer = reuse, np.zeros(4)

    def grad(self, handle, inputs, cotangent):  # type: ignore[no-untyped-def]
        g = self.buffer if self.reuse else np.ones(4)
        return {"layers.0.fc1.weight": g, "layers.1.fc1.weight": g}


def test_parameters_sharing_one_tensor_are_not_a_reused_buffer() -> None:
    record = Recorder()
    guarded = GuardedAdapter(SharedLayers(reuse=False), record)
    for _ in range(3):
        grads = guarded.grad(None, {"x": np.zeros(2)}, np.zeros(2))
        assert grads["layers.0.fc1.weight"] is not grads["layers.1.fc1.weight"]  # copies
    assert "adapter.output_reused" not in record.side_effects


def test_a_buffer_returned_again_by_a_later_call_is_reused() -> None:
    record = Recorder()
    guarded = GuardedAdapter(SharedLayers(reuse=True), record)
    guarded.grad(None, {"x": np.zeros(2)}, np.zeros(2))
    assert "adapter.output_reused" not in record.side_effects
    guarded.grad(None, {"x": np.zeros(2)}, np.zeros(2))
    assert "adapter.output_reused" in record.side_effects
