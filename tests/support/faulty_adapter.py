"""An adapter that breaks in one way, for tests/cli/test_reliability.py.

The reference layer_norm, except that one ``run`` call misbehaves: ``TCK_FAULT`` says how
(raise, nan, inf, shape, dtype, not_array, hang, segfault, abort, and the hostile ones of
tests/cli/test_reliability.py: ctrl_c, keyboard_interrupt, bad_str, exit0, native_hang, scribble,
scribble_buggy, zero_d, ansi, undecodable, chatty, bare_assert). It fires once per run,
in the first call of the oracle-equality check (the call that creates the file
``TCK_FAULT_ONCE`` names); every other call is correct, so exactly that check must go
wrong and every other one pass.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

import numpy as np

from tck.adapters import TorchModuleAdapter
from tck.adapters.reference import entry
from tck.reference import canonical_conventions

FAULT = os.environ.get("TCK_FAULT", "")


def _fire() -> bool:
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    # the check's own call, not a fixture's setup (the float32-island measurement of §10.12
    # builds and runs the subject while the first check of a subject sets up)
    if "test_equality.py::test_oracle[" not in current or not current.endswith("(call)"):
        return False
    try:  # O_EXCL: one process wins, in any number of xdist workers
        os.close(os.open(os.environ["TCK_FAULT_ONCE"], os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


class _BadStr(RuntimeError):
    def __str__(self) -> str:
        raise ValueError("__str__ itself fails")


class Faulty(TorchModuleAdapter):
    def run(self, handle, inputs):
        if FAULT == "scribble_buggy" and _fire():
            # reverses its input's features in place, then normalises what it changed: an
            # oracle that reads the changed input would agree with it
            inputs["x"][...] = inputs["x"][..., ::-1].copy()
            return super().run(handle, inputs)
        out = super().run(handle, inputs)
        if FAULT == "chatty":  # every call: TCK_CHATTY_MB megabytes of output (default 1)
            print("chatter " * (131_072 * int(os.environ.get("TCK_CHATTY_MB", "1"))))
        if not _fire():
            return out
        if FAULT == "ctrl_c":  # a real SIGINT to the tck process (TCK_SIGINT: self, parent)
            target = os.getppid() if os.environ.get("TCK_SIGINT") == "parent" else os.getpid()
            os.kill(target, signal.SIGINT)
            time.sleep(30)  # the interrupt arrives meanwhile
            return out
        if FAULT == "keyboard_interrupt":
            raise KeyboardInterrupt
        if FAULT == "bad_str":
            raise _BadStr()
        if FAULT == "exit0":
            os._exit(0)
        if FAULT == "native_hang":  # native code that no signal interrupts: SIGALRM blocked
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            ctypes.CDLL(None).sleep(3600)
        if FAULT == "scribble":  # correct output, but the input is changed afterwards
            inputs["x"][...] = 0.0
            return out
        if FAULT == "zero_d":
            return np.array(1.0)
        if FAULT == "ansi":
            raise RuntimeError("\x1b[31mred\x1b[0m\x00\x07\x0c]]><![CDATA[<b>\r\x7f\x9b2J")
        if FAULT == "undecodable":
            raise RuntimeError(b"bytes \xff\xfe not utf-8".decode("utf-8", "surrogateescape"))
        if FAULT == "chatty":
            raise RuntimeError("chatty and broken")
        if FAULT == "bare_assert":
            assert out.shape[-1] == -1
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
