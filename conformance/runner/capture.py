"""Captured output, bounded while it is captured: an adapter that prints megabytes per call
costs the run a fixed amount of memory, not the sum of what it printed.

pytest's own capture holds everything a check prints until the check ends (a temporary
file read back whole, then decoded): 2.4 GB of memory for an adapter that prints 10 MB per
call. ``tck run`` turns it off (``--capture=no``) and the plugin captures each phase of a
check itself (``--tck-capture=bounded``): file descriptors 1 and 2 go to pipes whose reader
threads keep the first and the last ``limit // 2`` bytes and count what they leave out.
Output written by processes the adapter started and left running after the check goes
nowhere once the check is over.
"""

from __future__ import annotations

import io
import os
import sys
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager


class BoundedSink:
    """The head and the tail of a byte stream, at most ``limit`` bytes in all."""

    def __init__(self, limit: int):
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_bytes = 0
        self.left_out = 0
        self.lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self.lock:
            room = self.half - len(self.head)
            if room > 0:
                self.head += data[:room]
                data = data[room:]
            if not data:
                return
            self.tail.append(data[-self.half :])
            self.left_out += max(len(data) - self.half, 0)
            self.tail_bytes += min(len(data), self.half)
            while self.tail_bytes - len(self.tail[0]) >= self.half:  # drop whole old chunks
                dropped = self.tail.popleft()
                self.tail_bytes -= len(dropped)
                self.left_out += len(dropped)

    def text(self) -> str:
        with self.lock:
            tail = b"".join(self.tail)
            extra = max(len(tail) - self.half, 0)  # the oldest chunk may overhang
            tail, left_out = tail[extra:], self.left_out + extra
            head = bytes(self.head)
        decode = lambda b: b.decode("utf-8", "replace")  # noqa: E731
        if not left_out:
            return decode(head + tail)
        return f"{decode(head)}\n[... {left_out} bytes left out ...]\n{decode(tail)}"


class _Pipe:
    """File descriptor ``fd`` redirected into a pipe that a thread drains into ``sink``."""

    def __init__(self, fd: int, sink: BoundedSink):
        self.fd, self.sink = fd, sink
        self.saved = os.dup(fd)
        read_end, write_end = os.pipe()
        os.dup2(write_end, fd)
        os.close(write_end)  # fd is now the only write end: restoring it ends the stream
        self.thread = threading.Thread(target=self._drain, args=(read_end,), daemon=True)
        self.thread.start()

    def _drain(self, read_end: int) -> None:
        try:
            while chunk := os.read(read_end, 1 << 16):
                self.sink.write(chunk)
        finally:
            os.close(read_end)

    def close(self) -> None:
        os.dup2(self.saved, self.fd)
        os.close(self.saved)
        # a child process still holding the pipe: its output goes on into the bounded sink
        self.thread.join(timeout=2.0)


class _SinkText(io.TextIOBase):
    """sys.stdout or sys.stderr while captured: text straight into the sink (the streams
    they replace may be anything, a StringIO included)."""

    def __init__(self, sink: BoundedSink, fd: int):
        self.sink, self.fd = sink, fd

    def write(self, text: str) -> int:
        self.sink.write(str(text).encode("utf-8", "replace"))
        return len(text)

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:  # what faulthandler and subprocess ask for: the pipe
        return self.fd

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"


@contextmanager
def bounded_capture(limit: int) -> Iterator[dict[str, BoundedSink]]:
    """Capture file descriptors 1 and 2, and sys.stdout and sys.stderr, into
    {"stdout": sink, "stderr": sink}, each keeping at most ``limit`` bytes."""
    sinks = {"stdout": BoundedSink(limit), "stderr": BoundedSink(limit)}
    _flush()
    streams = sys.stdout, sys.stderr
    pipes = [_Pipe(1, sinks["stdout"]), _Pipe(2, sinks["stderr"])]
    sys.stdout, sys.stderr = _SinkText(sinks["stdout"], 1), _SinkText(sinks["stderr"], 2)
    try:
        yield sinks
    finally:
        sys.stdout, sys.stderr = streams
        for pipe in pipes:
            pipe.close()


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a stream an adapter replaced or closed: nothing to flush
            pass
