"""The reference layer_norm, imported by a worker process that then sends Ctrl-C (SIGINT)
to its whole process group, as a terminal does: for tests/cli/test_hostile.py, a Ctrl-C while
the workers are starting. Imported by the tck process itself, it does nothing."""

from __future__ import annotations

import os
import signal

from tck.adapters import TorchModuleAdapter
from tck.adapters.reference import entry
from tck.reference import canonical_conventions

adapter = TorchModuleAdapter(
    "interrupt-on-import", [entry("layer_norm", canonical_conventions("layer_norm"))]
)

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.killpg(os.getpgid(0), signal.SIGINT)
