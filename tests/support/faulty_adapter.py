"""An adapter that breaks in one way, for tests/test_reliability.py.

The reference layer_norm, except that one ``run`` call misbehaves: ``TCK_FAULT`` says how
(raise, nan, inf, shape, dtype, not_array, hang, segfault, abort). It fires once per run,
in the first call of the oracle-equality check (the call that creates the file
``TCK_FAULT_ONCE`` names); every other call is correct, so exactly that check must go
wrong and every other one pass.
"""

from __future__ import annotations

import ctypes
import os
import time

import numpy as np

from tck.adapters import TorchModuleAdapter
from tck.adapters.reference import entry
from tck.reference import canonical_conventions

FAULT = os.environ.get("TCK_FAULT", "")


def _fire() -> bool:
    if "test_equality.py::test_oracle[" not in os.environ.get("PYTEST_CURRENT_TEST", ""):
        return False
    try:  # O_EXCL: one process wins, in any number of xdist workers
        os.close(os.open(os.environ["TCK_FAULT_ONCE"], os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


class Faulty(TorchModuleAdapter):
    def run(self, handle, inputs):
        out = super().run(handle, inputs)
        if not _fire():
            return out
        if FAULT == "raise":
            raise RuntimeError("the adapter <b>exploded</b>")
        if FAULT == "nan":
            return np.full_like(out, np.nan)
        if FAULT == "inf":
            return np.where(np.arange(out.shape[-1]) == 0, np.inf, out)
        if FAULT == "shape":
            return out[..., :-1]
        if FAULT == "dtype":
            return out.astype(np.int64)
        if FAULT == "not_array":
            return out.tolist()
        if FAULT == "hang":
            time.sleep(3600)
        if FAULT == "segfault":
            ctypes.string_at(0)  # reads address 0: SIGSEGV in native code
        if FAULT == "abort":
            os.abort()
        raise ValueError(f"unknown TCK_FAULT {FAULT!r}")


adapter = Faulty(f"faulty[{FAULT}]", [entry("layer_norm", canonical_conventions("layer_norm"))])
