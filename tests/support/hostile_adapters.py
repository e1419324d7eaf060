"""Adapters that break outside ``run``, for tests/cli/test_reliability.py: in ``subjects``, in
their names, in ``load`` and ``params``, or by reusing their output buffer.

Each is the reference layer_norm (and ffn) otherwise.
"""

from __future__ import annotations

import os
from typing import ClassVar

import numpy as np

from tck.adapters import Subject, TorchModuleAdapter
from tck.adapters.reference import entry
from tck.reference import canonical_conventions


def _entries(*names: str) -> list:
    return [entry("layer_norm", canonical_conventions("layer_norm"), name=n) for n in names]


class SubjectsRaise(TorchModuleAdapter):
    def subjects(self) -> list[Subject]:
        raise RuntimeError("no subjects today")


class SubjectsExit(TorchModuleAdapter):
    def subjects(self) -> list[Subject]:
        raise SystemExit(0)


class Twins(TorchModuleAdapter):
    """Offers its one subject twice, under one name."""

    def subjects(self) -> list[Subject]:
        return [*super().subjects(), *super().subjects()]


class CrashOnRun(TorchModuleAdapter):
    """Dies (os.abort) in the oracle check of every subject: the worker is gone."""

    def run(self, handle, inputs):
        if "test_equality.py::test_oracle[" in os.environ.get("PYTEST_CURRENT_TEST", ""):
            os.abort()
        return super().run(handle, inputs)


class CrashAlways(TorchModuleAdapter):
    """Dies (os.abort) in every call: xdist replaces its workers until it gives up."""

    def run(self, handle, inputs):
        os.abort()


class ReusesOutput(TorchModuleAdapter):
    """Correct values, written into one buffer it returns on every call."""

    buffers: ClassVar[dict] = {}

    def run(self, handle, inputs):
        out = super().run(handle, inputs)
        buffer = self.buffers.get(id(handle))
        if buffer is None or buffer.shape != out.shape:
            buffer = self.buffers[id(handle)] = np.empty_like(out)
        buffer[...] = out
        return buffer


class NoisyReusesOutput(ReusesOutput):
    """A different answer on every call, in a reused buffer: only private copies see it."""

    calls = 0

    def run(self, handle, inputs):
        out = super().run(handle, inputs)
        NoisyReusesOutput.calls += 1
        out += 1e-3 * NoisyReusesOutput.calls
        return out


class LoadRaises(TorchModuleAdapter):
    def load(self, handle, params):
        raise RuntimeError("load is broken")


subjects_raise = SubjectsRaise("subjects-raise", _entries("layer_norm"))
subjects_exit = SubjectsExit("subjects-exit", _entries("layer_norm"))
duplicate_names = Twins("twins", _entries("layer_norm"))
non_ascii_crash = CrashOnRun("non-ascii", _entries("layer_norm[é ü 名]"))
newline_name = TorchModuleAdapter("newline", _entries('ln\nimport os; os.system("echo PWNED")\n#'))
reuses_output = ReusesOutput("reuses-output", _entries("layer_norm"))
noisy_reuses_output = NoisyReusesOutput("noisy-reuses-output", _entries("layer_norm"))
crash_always = CrashAlways("crash-always", _entries("layer_norm"))
load_raises = LoadRaises("load-raises", _entries("layer_norm"))
