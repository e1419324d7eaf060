"""The watchdog that ends a process stuck in native code.

pytest-timeout's signal method stops a check that runs Python code; one stuck in native code
(a C loop holding the GIL, a blocked signal) never returns to the interpreter to see it.
faulthandler's watchdog is a native thread that needs no GIL: past its deadline it writes the
Python stacks into a marker file and ends the process. Under pytest-xdist that is the
worker, which xdist replaces; the controller finds the marker that names the check and
reports the row as ``adapter.timeout`` instead of ``adapter.crashed``.

Arming faulthandler starts a thread and cancelling joins it (~0.7 ms a check, ~1 CPU s of an
800-check run, with a marker file opened and removed per check). So one watchdog serves a
process: one marker file, its first line rewritten at each check's start (three system
calls), and the deadline re-armed only when it is more than ``SLACK`` of the limit old. A
check that hangs is thus ended between ``limit`` and ``(1 + SLACK) * limit`` seconds after
it started (limit = tck run --timeout + ``GRACE_S``), never before.
"""

from __future__ import annotations

import faulthandler
import os
import time
from pathlib import Path

GRACE_S = 5.0  # after --timeout: pytest-timeout's own stop comes first where it can
SLACK = 0.1
TIMED_OUT = "Timeout ("  # faulthandler's first words when the deadline passes


class Watchdog:
    """One per process: ``start(nodeid)`` as each check begins, ``stop()`` as it ends,
    ``close()`` when the process is done with checks."""

    def __init__(self, directory: Path, timeout_s: float):
        self.limit = timeout_s + GRACE_S
        self.path = directory / f"process-{os.getpid()}"
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self.armed_at: float | None = None

    def start(self, nodeid: str) -> None:
        header = (
            f"{nodeid}\ntck: this check did not finish within {self.limit - GRACE_S} s and "
            "did not return to Python (a hang in native code): the process was ended.\n"
        ).encode("utf-8", "backslashreplace")
        os.lseek(self.fd, 0, os.SEEK_SET)
        os.write(self.fd, header)
        os.ftruncate(self.fd, len(header))  # faulthandler writes after it, at the offset
        now = time.monotonic()
        if self.armed_at is None or now - self.armed_at > SLACK * self.limit:
            # fires no sooner than `limit` after any check that starts before the next re-arm
            faulthandler.dump_traceback_later((1 + SLACK) * self.limit, exit=True, file=self.fd)
            self.armed_at = now

    def stop(self) -> None:
        """Cancel where the next ``start`` would re-arm anyway: a deadline left armed between
        checks ends the process only if that gap alone outlasts the limit."""
        if self.armed_at is not None and time.monotonic() - self.armed_at > SLACK * self.limit:
            self._disarm()

    def close(self) -> None:
        self._disarm()
        os.close(self.fd)
        self.path.unlink(missing_ok=True)

    def _disarm(self) -> None:
        if self.armed_at is not None:
            faulthandler.cancel_dump_traceback_later()
            self.armed_at = None


def timed_out(directory: Path, nodeid: str) -> bool:
    """Did a watchdog writing into ``directory`` end the process running ``nodeid``? (A
    process that died otherwise leaves its marker without faulthandler's words.)"""
    want = nodeid.encode("utf-8", "backslashreplace")
    for marker in directory.glob("process-*"):
        try:
            first, _, rest = marker.read_bytes().partition(b"\n")
        except OSError:
            continue
        if first == want and TIMED_OUT.encode() in rest:
            return True
    return False
