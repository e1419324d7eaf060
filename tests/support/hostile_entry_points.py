"""Correct adapters whose entry points besides ``run`` misbehave in ways that must change
no verdict, for tests/cli/test_hostile.py: ``step`` returning one reused buffer or writing into
its ``key_padding``, ``grad`` writing into its cotangent and reusing its output buffers,
``load`` zeroing the parameters it was given after loading them.

Each is the reference causal_self_attention (and layer_norm) otherwise: the values it
returns are right, so the only finding may be the side effect.
"""

from __future__ import annotations

import numpy as np

from tck.adapters import TorchModuleAdapter
from tck.adapters.reference import entry
from tck.reference import canonical_conventions


def _entries(*components: str) -> list:
    return [entry(c, canonical_conventions(c)) for c in components]


class StaticStepBuffer(TorchModuleAdapter):
    """A static-buffer decoder: every step's output is written into one preallocated
    buffer, and a view of it is returned."""

    def step(self, handle, inputs, cache):
        out, cache = super().step(handle, inputs, cache)
        buffer = handle.__dict__.setdefault("static_out", np.zeros((8, 64, 64)))
        b, length, d = out.shape
        view = buffer[:b, :length, :d]
        view[...] = out
        return view, cache


class StepWritesKeyPadding(TorchModuleAdapter):
    """Marks every key of its ``key_padding`` input kept once it has used it."""

    def step(self, handle, inputs, cache):
        out, cache = super().step(handle, inputs, cache)
        if "key_padding" in inputs:
            inputs["key_padding"][...] = True
        return out, cache


class GradScribbles(TorchModuleAdapter):
    """Right gradients, written into one buffer per name it reuses; zeroes its cotangent."""

    def grad(self, handle, inputs, cotangent):
        grads = super().grad(handle, inputs, cotangent)
        cotangent[...] = 0.0
        for name in inputs:
            inputs[name][...] = 0 if inputs[name].dtype == bool else inputs[name] * 2
        buffers = handle.__dict__.setdefault("static_grads", {})
        out = {}
        for name, value in grads.items():
            if buffers.get(name) is None or buffers[name].shape != value.shape:
                buffers[name] = np.empty_like(value)
            buffers[name][...] = value
            out[name] = buffers[name]
        return out


class LoadZeroes(TorchModuleAdapter):
    """Loads the parameters, then zeroes the arrays it was given (the caller's, if shared)."""

    def load(self, handle, params):
        super().load(handle, params)
        for value in params.values():
            value[...] = 0.0


static_step_buffer = StaticStepBuffer("static-step-buffer", _entries("causal_self_attention"))
step_writes_key_padding = StepWritesKeyPadding(
    "step-writes-key-padding", _entries("causal_self_attention")
)
grad_scribbles = GradScribbles("grad-scribbles", _entries("layer_norm"))
load_zeroes = LoadZeroes("load-zeroes", _entries("layer_norm"))


class SetsGlobals(TorchModuleAdapter):
    """Correct, but changes process-wide settings in every call and keeps relying on them:
    numpy raises on any floating-point error, torch's default dtype is float64, grad mode
    off, deterministic algorithms on, all threads."""

    def _set(self) -> None:
        import torch

        np.seterr(all="raise")
        torch.set_default_dtype(torch.float64)
        torch.set_grad_enabled(False)
        torch.use_deterministic_algorithms(True)

    def build(self, subject, config, **kwargs):
        self._set()
        return super().build(subject, config, **kwargs)

    def run(self, handle, inputs):
        import torch

        # what it set in build is what it sees here: its own world
        assert np.geterr()["divide"] == "raise" and torch.get_default_dtype() == torch.float64
        out = super().run(handle, inputs)
        self._set()
        return out


sets_globals = SetsGlobals("sets-globals", _entries("layer_norm", "mha", "causal_self_attention"))
np.seterr(all="raise")  # at import, too: before any check runs
