"""Timers, statistics and peak memory: how one call is measured (docs/benchmarks/README.md).

    samples = measure(fn, device, Budget())      # seconds per call, one sample per round
    stats = summarize(samples.seconds)           # pytest-benchmark's fields, median and IQR
    peak = peak_memory(fn, device)               # bytes above the level before the call

CUDA: each round records a ``torch.cuda.Event(enable_timing=True)`` pair around one call on
the current stream, after writing a buffer larger than the L2 cache (so no round starts with
its operands cached by the previous one); all events are read after one
``torch.cuda.synchronize()``. CPU: ``time.perf_counter`` around one call; torch's CPU ops
are synchronous, so the call has finished when it returns.

Warm-up runs the call until ``Budget.warmup_s`` has passed (at least ``warmup_rounds``
calls; the first call pays for lazy initialisation, kernel selection and allocator growth).
Rounds then continue until ``min_rounds`` and ``min_time_s`` are both reached and the median
is stable, or until ``max_time_s`` / ``max_rounds``: stable means the 95% confidence
half-width of the median, 1.57 * IQR / sqrt(n) (the notch of a box plot), is at most
``rel_ci`` of the median.
"""

from __future__ import annotations

import ctypes
import math
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

# Bigger than the L2 of every current GPU (H100: 50 MiB, H200: 50 MiB, B200: 126 MiB).
L2_FLUSH_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Budget:
    """How long to warm up and how many rounds to take (see the module docstring)."""

    warmup_s: float = 0.05
    warmup_rounds: int = 2
    min_rounds: int = 5
    max_rounds: int = 1000
    min_time_s: float = 0.2
    max_time_s: float = 2.0
    rel_ci: float = 0.01

    def __post_init__(self) -> None:
        if self.warmup_rounds < 1 or self.min_rounds < 1 or self.max_rounds < self.min_rounds:
            raise ValueError(
                f"need warmup_rounds >= 1 and 1 <= min_rounds <= max_rounds, got {self}"
            )
        if min(self.warmup_s, self.min_time_s, self.max_time_s, self.rel_ci) < 0:
            raise ValueError(f"times and rel_ci must be >= 0, got {self}")


@dataclass(frozen=True)
class Samples:
    """Seconds per call, one per round, and how the measurement ended."""

    seconds: list[float]
    warmup_rounds: int
    timer: str  # "cuda-events" or "perf_counter"
    stable: bool  # the median's confidence half-width reached Budget.rel_ci
    l2_flush_bytes: int = 0


# ------------------------------------------------------------------------- statistics


def quartiles(data: list[float]) -> tuple[float, float]:
    """Q1 and Q3 by the rule pytest-benchmark uses (Tukey's hinges: methods 2 and 3 of
    https://en.wikipedia.org/wiki/Quartile#Computing_methods), so the figures agree."""
    s, n = sorted(data), len(data)
    if n == 1:
        return s[0], s[0]
    if n % 2 == 0:  # method 2: medians of the lower and the upper half
        return statistics.median(s[: n // 2]), statistics.median(s[n // 2 :])
    m, r = n // 4, n % 4  # method 3
    if r == 1:
        return 0.25 * s[m - 1] + 0.75 * s[m], 0.75 * s[3 * m] + 0.25 * s[3 * m + 1]
    return 0.75 * s[m] + 0.25 * s[m + 1], 0.25 * s[3 * m + 1] + 0.75 * s[3 * m + 2]


def median_ci_rel(data: list[float]) -> float:
    """Relative 95% half-width of the median: 1.57 * IQR / sqrt(n) / median (McGill et al.
    1978, the notch of a box plot). inf with fewer than 3 samples."""
    if len(data) < 3:
        return math.inf
    q1, q3 = quartiles(data)
    median = statistics.median(data)
    return 1.57 * (q3 - q1) / math.sqrt(len(data)) / median if median > 0 else math.inf


def summarize(data: list[float]) -> dict[str, Any]:
    """The ``stats`` object of a pytest-benchmark JSON entry (seconds), for ``data``."""
    if not data:
        raise ValueError("no samples to summarize")
    s, n = sorted(data), len(data)
    mean = statistics.mean(s)
    stddev = statistics.stdev(s) if n > 1 else 0.0
    q1, q3 = quartiles(s)
    iqr = q3 - q1
    low, high = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    iqr_outliers = sum(1 for x in s if x < low or x > high)
    stddev_outliers = sum(1 for x in s if x < mean - stddev or x > mean + stddev)
    total = math.fsum(s)
    return {
        "min": s[0],
        "max": s[-1],
        "mean": mean,
        "stddev": stddev,
        "rounds": n,
        "median": statistics.median(s),
        "iqr": iqr,
        "q1": q1,
        "q3": q3,
        "iqr_outliers": iqr_outliers,
        "stddev_outliers": stddev_outliers,
        "outliers": f"{stddev_outliers};{iqr_outliers}",
        # the lowest and highest datum within 1.5 IQR of the quartiles (Tukey's whiskers)
        "ld15iqr": s[0] if n == 1 else next(x for x in s if x >= low),
        "hd15iqr": s[-1] if n == 1 else max(x for x in s if x <= high),
        "ops": n / total if total else 0.0,
        "total": total,
        "data": list(data),
        "iterations": 1,
    }


def growth_exponent(lengths: list[int], values: list[float]) -> float | None:
    """Least-squares slope of log(value) against log(length): ~1 for memory linear in N,
    ~2 for an N x N matrix. None with fewer than 3 positive points or a single length."""
    points = [(n, v) for n, v in zip(lengths, values, strict=True) if n > 0 and v and v > 0]
    if len(points) < 3 or len({n for n, _ in points}) < 2:
        return None
    x = np.log([n for n, _ in points])
    y = np.log([v for _, v in points])
    slope, _ = np.polyfit(x, y, 1)
    return float(slope)


# ---------------------------------------------------------------------------- timing


def _cpu_round(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class _CudaRounds:
    """Event pairs around calls, each after an L2 flush; read after one synchronize."""

    def __init__(self, device: Any):
        import torch

        self.torch = torch
        self.flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=device)

    def run(self, fn: Callable[[], Any], rounds: int) -> list[float]:
        torch = self.torch
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(rounds)
        ]
        for start, end in events:
            self.flush.zero_()  # evicts the previous round's operands from L2
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) / 1e3 for start, end in events]  # ms -> s


def measure(fn: Callable[[], Any], device: str, budget: Budget = Budget()) -> Samples:
    """Warm up, then time rounds of one call each until the budget says stop."""
    cuda = device.startswith("cuda")
    rounds_on = _CudaRounds(device) if cuda else None

    def take(count: int) -> list[float]:
        if rounds_on is not None:
            return rounds_on.run(fn, count)
        return [_cpu_round(fn) for _ in range(count)]

    began = time.perf_counter()
    warm = take(budget.warmup_rounds)
    while time.perf_counter() - began < budget.warmup_s:
        warm += take(max(1, len(warm)))  # doubling: few synchronisations on CUDA
    per_call = max(statistics.median(warm), 1e-9)
    # Rounds in batches of about 10% of the minimum time, so that the stopping rule is
    # checked often but a CUDA batch still queues many calls between synchronisations.
    batch = int(min(max(1, 0.1 * budget.min_time_s / per_call), budget.max_rounds))
    seconds: list[float] = []
    began = time.perf_counter()
    while True:
        wanted = max(batch, budget.min_rounds - len(seconds))
        seconds += take(min(wanted, budget.max_rounds - len(seconds)))
        elapsed = time.perf_counter() - began
        stable = median_ci_rel(seconds) <= budget.rel_ci
        if len(seconds) >= budget.max_rounds or elapsed >= budget.max_time_s:
            break
        if len(seconds) >= budget.min_rounds and elapsed >= budget.min_time_s and stable:
            break
    return Samples(
        seconds=seconds,
        warmup_rounds=len(warm),
        timer="cuda-events" if cuda else "perf_counter",
        stable=stable,
        l2_flush_bytes=L2_FLUSH_BYTES if cuda else 0,
    )


# ------------------------------------------------------------------------ peak memory

CPU_SAMPLE_PERIOD_S = 0.0005


def _resident_bytes() -> int:
    """Resident set size now, from /proc/self/statm (pages * page size)."""
    import os

    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_memory_supported() -> bool:
    try:
        _resident_bytes()
    except (OSError, ValueError, IndexError):
        return False
    return True


@contextmanager
def _malloc_returns_memory() -> Iterator[None]:
    """glibc: serve every block of 128 KiB or more by mmap, and trim the heap top above 128
    KiB, so that a freed tensor leaves the resident set at once and the RSS follows the
    live allocations. Afterwards the thresholds are left at glibc's dynamic ceilings
    (32 MiB mmap, 64 MiB trim), where a long run of large allocations would bring them."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc: RSS is sampled as it is
        yield
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 128 * 1024)
    mallopt(m_trim_threshold, 128 * 1024)
    libc.malloc_trim(0)
    try:
        yield
    finally:
        mallopt(m_mmap_threshold, 32 * 2**20)
        mallopt(m_trim_threshold, 64 * 2**20)


def _cpu_peak(fn: Callable[[], Any], min_time_s: float, min_calls: int) -> int:
    """Peak RSS above the level before the calls, sampled every CPU_SAMPLE_PERIOD_S by a
    thread while ``fn`` repeats (torch and numpy release the GIL in their kernels)."""
    import gc

    gc.collect()
    with _malloc_returns_memory():
        baseline = _resident_bytes()
        peak = baseline
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, _resident_bytes())
                time.sleep(CPU_SAMPLE_PERIOD_S)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            began, calls = time.perf_counter(), 0
            while calls < min_calls or time.perf_counter() - began < min_time_s:
                fn()
                calls += 1
                peak = max(peak, _resident_bytes())
        finally:
            done.set()
            sampler.join()
    return max(0, peak - baseline)


def _cuda_peak(fn: Callable[[], Any], device: str) -> int:
    import torch

    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    baseline = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return max(0, torch.cuda.max_memory_allocated(device) - baseline)


def peak_memory(
    fn: Callable[[], Any], device: str, *, min_time_s: float = 0.05, min_calls: int = 3
) -> int | None:
    """Bytes the call needs above what was allocated before it: on CUDA,
    ``max_memory_allocated`` (exact, the caching allocator's view); on CPU, the sampled
    peak RSS (resolution: one page and CPU_SAMPLE_PERIOD_S). None where neither exists."""
    if device.startswith("cuda"):
        return _cuda_peak(fn, device)
    if not cpu_memory_supported():
        return None
    return _cpu_peak(fn, min_time_s, min_calls)
