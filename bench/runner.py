"""The sweep: every (dtype, pass, batch, N) of the adapter's components and the baselines,
timed, sized in FLOPs and memory, and written as pytest-benchmark JSON plus an HTML page.

    from tck.bench import BenchOptions, run_bench
    document = run_bench(BenchOptions(adapter="torch.nn", device="cpu"))

The document is pytest-benchmark's JSON layout (``machine_info``, ``commit_info``,
``benchmarks`` with ``stats`` in seconds, ``datetime``, ``version``), so its compare tools
read it; what is ours sits in each benchmark's ``extra_info`` and in the top-level ``tck``.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import torch

import tck
from tck.adapters import Adapter, Subject, Unsupported, load_adapter
from tck.reference import Config, select

from .peaks import nominal_peak, nominal_tflops
from .timing import Budget, growth_exponent, measure, median_ci_rel, peak_memory, summarize
from .workloads import (
    BASELINES,
    FORWARD,
    ORACLE,
    PASSES,
    SDPA_BACKENDS,
    Call,
    adapter_call,
    matmul_call,
    oracle_call,
    sdpa_call,
)

SCHEMA = 1
# pytest-benchmark's JSON format version this layout follows (its "version" field).
PYTEST_BENCHMARK_FORMAT = "5.3.1"
# Below this, a peak is noise for the memory fit (CPU: allocator and page granularity).
MEASURABLE_BYTES = {"cpu": 2**20, "cuda": 64 * 2**10}

Log = Callable[[str], None]


@dataclass(frozen=True)
class BenchOptions:
    """One sweep. Sizes: a model of width ``d_model`` with ``heads`` heads (head dim
    d_model / heads), ``d_ff`` (default 4 * d_model) and ``layers`` for the stacks."""

    adapter: str = "torch.nn"
    components: tuple[str, ...] = select("attention")  # the attention op and MHA
    dtypes: tuple[str, ...] = ("float32",)
    seqs: tuple[int, ...] = (128, 256, 512, 1024)
    batches: tuple[int, ...] = (1,)
    device: str = "cpu"
    passes: tuple[str, ...] = PASSES
    causal: bool = False
    d_model: int = 1024
    heads: int = 16
    d_ff: int | None = None
    layers: int = 2
    baselines: tuple[str, ...] = BASELINES
    budget: Budget = field(default_factory=Budget)
    max_call_s: float = 5.0  # a series stops at the first N whose single call takes longer
    matmul_size: int | None = None  # default: 8192 on CUDA, 1024 on the CPU
    do_bench: str = "auto"  # compare with triton.testing.do_bench: auto | yes | no
    memory: bool = True
    seed: int = 0

    def config(self) -> Config:
        return Config(
            d_model=self.d_model,
            n_heads=self.heads,
            d_ff=self.d_ff or 4 * self.d_model,
            n_layers=self.layers,
            n_decoder_layers=self.layers,
            vocab_size=1000,
            max_len=max(self.seqs),
        )


@dataclass
class Point:
    """Where one measurement sits in the sweep."""

    dtype: str
    pass_: str
    batch: int
    seq: int
    causal: bool

    def configuration(self) -> str:
        return f"{self.dtype} {self.pass_} B={self.batch}" + (" causal" if self.causal else "")


class _Stop(Exception):
    """This series cannot go on to larger N (out of memory, or too slow)."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _is_oom(err: BaseException) -> bool:
    oom = getattr(torch.cuda, "OutOfMemoryError", ())
    return (
        isinstance(err, MemoryError)
        or (oom and isinstance(err, oom))
        or (isinstance(err, RuntimeError) and "out of memory" in str(err).lower())
    )


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


def _do_bench() -> Callable[..., float] | None:
    try:
        from triton.testing import do_bench
    except Exception:  # triton missing or broken: the comparison is skipped, and said so
        return None
    return do_bench


class Runner:
    def __init__(self, options: BenchOptions, adapter: Adapter, log: Log):
        self.options = options
        self.adapter = adapter
        self.log = log
        self.device = options.device
        self.kind = "cuda" if self.device.startswith("cuda") else "cpu"
        self.benchmarks: list[dict[str, Any]] = []
        self.skipped: list[dict[str, Any]] = []
        self.stopped: dict[tuple, str] = {}
        self.environment = environment(self.device)
        self.nominal = (
            nominal_peak(self.environment.get("gpu", "")) if self.kind == "cuda" else None
        )
        self.tf32 = bool(self.kind == "cuda" and torch.backends.cuda.matmul.allow_tf32)
        self.matmul: dict[str, dict[str, Any]] = {}
        self.do_bench = _do_bench() if self.kind == "cuda" and options.do_bench != "no" else None

    # ------------------------------------------------------------------ one measurement

    def _measure(self, call: Call, point: Point) -> dict[str, Any]:
        options, budget = self.options, self.options.budget
        with call.context():
            began = time.perf_counter()
            call.fn()
            _sync(self.device)
            first = time.perf_counter() - began
            if first > options.max_call_s:
                raise _Stop(
                    "too_slow",
                    f"one call took {first:.3g} s at N={point.seq}, over --max-call-s "
                    f"{options.max_call_s:g}; larger N skipped",
                )
            samples = measure(call.fn, self.device, budget)
            median = statistics.median(samples.seconds)
            peak = None
            if options.memory:
                calls = 1 if median > 0.1 else 3
                peak = peak_memory(call.fn, self.device, min_calls=calls)
            do_bench_s = None
            if self.do_bench is not None and call.kind != "peak":
                do_bench_s = self.do_bench(call.fn, warmup=25, rep=100, return_mode="median") / 1e3
        stats = summarize(samples.seconds)
        return {"samples": samples, "stats": stats, "peak": peak, "do_bench_s": do_bench_s}

    def _record(self, call: Call, point: Point) -> None:
        key = _series(call.label, point)
        try:
            m = self._measure(call, point)
        except _Stop as stop:
            self.stopped[key] = str(stop)
            self._skip(call.label, point, stop.status, str(stop))
            return
        except Exception as err:  # the implementation under test may fail in any way
            if not _is_oom(err):
                self._skip(call.label, point, "error", _first_line(err))
                return
            if self.kind == "cuda":
                torch.cuda.empty_cache()
            reason = f"out of memory at N={point.seq}; larger N skipped"
            self.stopped[key] = reason
            self._skip(call.label, point, "oom", reason)
            return
        self.benchmarks.append(self._entry(call, point, m))
        e = self.benchmarks[-1]["extra_info"]
        self.log(
            f"{call.label:<28} {point.configuration():<34} N={point.seq:<6} "
            f"{m['stats']['median'] * 1e3:9.3f} ms  IQR {m['stats']['iqr'] * 1e3:8.3f} ms  "
            f"{e['tflops']:8.3f} TFLOP/s"
        )

    def _skip(self, label: str, point: Point, status: str, reason: str) -> None:
        self.skipped.append({"label": label, **asdict(point), "status": status, "reason": reason})
        self.log(f"{label:<28} {point.configuration():<34} N={point.seq:<6} {status}: {reason}")

    def _entry(self, call: Call, point: Point, m: dict[str, Any]) -> dict[str, Any]:
        samples, stats = m["samples"], m["stats"]
        median = stats["median"]
        tflops = call.flops / median / 1e12
        nominal = None
        if self.kind == "cuda" and call.label.split(":")[0] != ORACLE:
            nominal = nominal_tflops(self.environment.get("gpu", ""), call.dtype, tf32=self.tf32)
        matmul = self.matmul.get(call.dtype, {}).get("tflops")
        on_device = not call.label.startswith(f"{ORACLE}:") or self.kind == "cpu"
        params = {
            "provider": call.label,
            "component": call.component,
            "dtype": call.dtype,
            "pass": call.pass_,
            "batch": point.batch,
            "seq_len": point.seq,
            "causal": point.causal,
            **call.shape,
        }
        extra = {
            **params,
            "kind": call.kind,
            "configuration": point.configuration(),
            "device": self.device if on_device else "cpu",
            "flops": call.flops,
            "tflops": tflops,
            "nominal_peak_tflops": nominal,
            "pct_nominal_peak": 100 * tflops / nominal if nominal else None,
            "matmul_peak_tflops": matmul if on_device else None,
            "pct_matmul_peak": 100 * tflops / matmul if matmul and on_device else None,
            "peak_memory_bytes": m["peak"],
            "memory_method": _memory_method(self.kind) if m["peak"] is not None else None,
            "memory_exponent": None,  # filled per series once the sweep is done
            "ratios": {},  # filled once every baseline of the point is measured
            "do_bench_median_s": m["do_bench_s"],
            "ratio_to_do_bench": median / m["do_bench_s"] if m["do_bench_s"] else None,
            "timer": samples.timer,
            "warmup_rounds": samples.warmup_rounds,
            "median_ci_rel": median_ci_rel(samples.seconds),
            "stable": samples.stable,
            "l2_flush_bytes": samples.l2_flush_bytes,
            "notes": list(call.notes),
        }
        if not math.isfinite(extra["median_ci_rel"]):
            extra["median_ci_rel"] = None
        name = f"{call.label} {point.configuration()} N={point.seq}"
        budget = self.options.budget
        return {
            "group": point.configuration(),
            "name": name,
            "fullname": f"tck-bench::{call.label}::{point.dtype}::{point.pass_}::B{point.batch}"
            f"::N{point.seq}" + ("::causal" if point.causal else ""),
            "params": params,
            "param": f"{point.dtype}-{point.pass_}-B{point.batch}-N{point.seq}",
            "extra_info": extra,
            "options": {
                "timer": samples.timer,
                "warmup": True,
                "min_rounds": budget.min_rounds,
                "max_time": budget.max_time_s,
                "min_time": budget.min_time_s,
                "disable_gc": False,
            },
            "stats": stats,
        }

    # -------------------------------------------------------------------------- sweep

    def _subjects(self) -> list[Subject]:
        subjects = self.adapter.subjects()
        chosen = []
        for name in self.options.components:
            by_name = [s for s in subjects if s.name == name]
            by_component = [s for s in subjects if s.component == name]
            chosen.append((by_name or by_component)[0])
        return chosen

    def measure_peaks(self) -> None:
        size = self.options.matmul_size or (8192 if self.kind == "cuda" else 1024)
        for dtype in self.options.dtypes:
            call = matmul_call(dtype, self.device, size)
            point = Point(dtype, FORWARD, 1, size, False)
            try:
                m = self._measure(call, point)
            except Exception as err:  # a dtype without a matmul here: no measured peak
                self.matmul[dtype] = {"size": size, "tflops": None, "error": _first_line(err)}
                continue
            median = m["stats"]["median"]
            self.matmul[dtype] = {
                "size": size,
                "median_s": median,
                "iqr_s": m["stats"]["iqr"],
                "tflops": call.flops / median / 1e12,
            }
            self.log(f"{call.label:<28} {dtype:<34} {call.flops / median / 1e12:8.3f} TFLOP/s")

    def sweep(self) -> None:
        """N ascending within every series, so that a series stops at its first N out of
        memory or over --max-call-s; one (B, N) at a time, so its inputs are built once."""
        options, config = self.options, self.options.config()
        subjects = self._subjects()
        sdpa = [b for b in options.baselines if b in SDPA_BACKENDS]
        for batch in options.batches:
            for seq in sorted(options.seqs):
                for dtype in options.dtypes:
                    for pass_ in options.passes:
                        point = Point(dtype, pass_, batch, seq, options.causal)
                        for subject in subjects:
                            label = f"{self.adapter.name}:{subject.name}"
                            self._run(
                                point, label, lambda s=subject, p=point: self._adapter_call(s, p)
                            )
                        for backend in sdpa:
                            label = f"sdpa[{backend}]"
                            self._run(
                                point, label, lambda b=backend, p=point: self._sdpa_call(b, p)
                            )
                if ORACLE not in options.baselines or FORWARD not in options.passes:
                    continue
                point = Point("float64", FORWARD, batch, seq, options.causal)
                for component in dict.fromkeys(s.component for s in subjects):
                    self._run(
                        point,
                        f"{ORACLE}:{component}",
                        lambda c=component, b=batch, n=seq: oracle_call(
                            c, config, batch=b, seq=n, causal=options.causal
                        ),
                    )

    def _adapter_call(self, subject: Subject, point: Point) -> Call:
        return adapter_call(
            self.adapter,
            subject,
            self.options.config(),
            batch=point.batch,
            seq=point.seq,
            dtype=point.dtype,
            pass_=point.pass_,
            causal=point.causal,
            device=self.device,
            seed=self.options.seed,
        )

    def _sdpa_call(self, backend: str, point: Point) -> Call:
        config = self.options.config()
        return sdpa_call(
            backend,
            batch=point.batch,
            heads=config.n_heads,
            seq=point.seq,
            head_dim=config.head_dim_k,
            dtype=point.dtype,
            pass_=point.pass_,
            causal=point.causal,
            device=self.device,
            seed=self.options.seed,
        )

    def _run(self, point: Point, label: str, make: Callable[[], Call]) -> None:
        """Build and time one call; a series that stopped (unsupported, out of memory, too
        slow) is recorded once, at the first N where it stopped."""
        if _series(label, point) in self.stopped:
            return
        try:
            call = make()
        except Unsupported as err:
            self.stopped[_series(label, point)] = str(err)
            self._skip(label, point, "unsupported", str(err))
            return
        except Exception as err:  # building at this size failed (memory, a config check)
            status = "oom" if _is_oom(err) else "error"
            self._skip(label, point, status, _first_line(err))
            return
        self._record(call, point)
        del call
        if self.kind == "cuda":
            torch.cuda.empty_cache()

    # ------------------------------------------------------------------ after the sweep

    def finish(self) -> list[dict[str, Any]]:
        """Ratios to the baselines, and the memory exponent of every series."""
        by_point: dict[tuple, list[dict[str, Any]]] = {}
        for b in self.benchmarks:
            e = b["extra_info"]
            by_point.setdefault((e["pass"], e["batch"], e["seq_len"], e["causal"]), []).append(b)
        for b in self.benchmarks:
            e = b["extra_info"]
            for other in by_point[(e["pass"], e["batch"], e["seq_len"], e["causal"])]:
                o = other["extra_info"]
                if other is b or o["kind"] != "baseline":
                    continue
                sdpa_match = o["provider"].startswith("sdpa[") and o["dtype"] == e["dtype"]
                oracle_match = o["provider"].startswith(f"{ORACLE}:") and (
                    o["component"] == e["component"]
                )
                if sdpa_match or oracle_match:
                    e["ratios"][o["provider"]] = b["stats"]["median"] / other["stats"]["median"]
        series: dict[tuple, list[dict[str, Any]]] = {}
        for b in self.benchmarks:
            e = b["extra_info"]
            key = (e["provider"], e["dtype"], e["pass"], e["batch"], e["causal"])
            series.setdefault(key, []).append(b)
        floor = MEASURABLE_BYTES[self.kind]
        summary = []
        for (label, dtype, pass_, batch, causal), members in series.items():
            members.sort(key=lambda b: b["extra_info"]["seq_len"])
            lengths = [b["extra_info"]["seq_len"] for b in members]
            peaks = [b["extra_info"]["peak_memory_bytes"] for b in members]
            usable = [p if p is not None and p >= floor else None for p in peaks]
            exponent = growth_exponent(lengths, usable)
            for b in members:
                b["extra_info"]["memory_exponent"] = exponent
            summary.append(
                {
                    "provider": label,
                    "kind": members[0]["extra_info"]["kind"],
                    "dtype": dtype,
                    "pass": pass_,
                    "batch": batch,
                    "causal": causal,
                    "seq_lens": lengths,
                    "median_s": [b["stats"]["median"] for b in members],
                    "tflops": [b["extra_info"]["tflops"] for b in members],
                    "peak_memory_bytes": peaks,
                    "memory_exponent": exponent,
                    "memory_points_fitted": sum(p is not None for p in usable),
                }
            )
        return summary


def _series(label: str, point: Point) -> tuple:
    return (label, point.dtype, point.pass_, point.batch, point.causal)


def _memory_method(kind: str) -> str:
    if kind == "cuda":
        return "torch.cuda.max_memory_allocated above memory_allocated before the call"
    return "peak RSS (/proc/self/statm, sampled every 0.5 ms) above the RSS before the call"


# ---------------------------------------------------------------------------- context


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], capture_output=True, text=True, timeout=10, check=True
    ).stdout.strip()


def commit_info() -> dict[str, Any]:
    """pytest-benchmark's commit_info, for the repository the command runs in."""
    try:
        commit = _git("rev-parse", "HEAD")
        return {
            "id": commit,
            "time": _git("show", "-s", "--pretty=format:%cI"),
            "author_time": _git("show", "-s", "--pretty=format:%aI"),
            "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
            "project": os.path.basename(_git("rev-parse", "--show-toplevel")),
            "branch": _git("rev-parse", "--abbrev-ref", "HEAD"),
        }
    except (OSError, subprocess.SubprocessError) as err:
        return {
            "id": "unknown",
            "time": None,
            "author_time": None,
            "dirty": False,
            "project": os.path.basename(os.getcwd()),
            "branch": "(unknown)",
            "error": _first_line(err),
        }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0] if out else None


def machine_info() -> dict[str, Any]:
    """pytest-benchmark's machine_info keys."""
    return {
        "node": platform.node(),
        "processor": platform.processor(),
        "machine": platform.machine(),
        "python_compiler": platform.python_compiler(),
        "python_implementation": platform.python_implementation(),
        "python_implementation_version": platform.python_version(),
        "python_version": platform.python_version(),
        "python_build": list(platform.python_build()),
        "release": platform.release(),
        "system": platform.system(),
        "cpu": {"brand_raw": _cpu_model(), "count": os.cpu_count(), "arch": platform.machine()},
    }


def environment(device: str) -> dict[str, Any]:
    """What the figures depend on: device, driver, library versions, threads."""
    import numpy

    env: dict[str, Any] = {
        "device": device,
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "python": sys.version.split()[0],
        "tck": tck.__version__,
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cuda_available": torch.cuda.is_available(),
    }
    if device.startswith("cuda"):
        index = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(index)
        env.update(
            {
                "gpu": torch.cuda.get_device_name(index),
                "gpu_capability": ".".join(map(str, torch.cuda.get_device_capability(index))),
                "gpu_memory_bytes": props.total_memory,
                "gpu_count": torch.cuda.device_count(),
                "driver": _driver(),
                "cuda_runtime": torch.version.cuda,
                "cudnn": torch.backends.cudnn.version(),
                "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            }
        )
        with contextlib.suppress(Exception):
            import triton

            env["triton"] = triton.__version__
    return env


def _pytest_benchmark_version() -> str:
    try:
        from pytest_benchmark import __version__
    except ImportError:
        return PYTEST_BENCHMARK_FORMAT
    return __version__


def run_bench(
    options: BenchOptions, adapter: Adapter | None = None, log: Log | None = None
) -> dict[str, Any]:
    """Run the sweep ``options`` describes and return the document (see the module doc)."""
    adapter = adapter if adapter is not None else load_adapter(options.adapter)
    runner = Runner(options, adapter, log or (lambda line: None))
    began = time.time()
    # CUDA events and the allocator's statistics are per device: make --device current.
    current = (
        torch.cuda.device(options.device) if runner.kind == "cuda" else contextlib.nullcontext()
    )
    interrupted = False
    try:
        with current:
            runner.measure_peaks()
            runner.sweep()
    except KeyboardInterrupt:  # Ctrl-C, or `timeout -s INT`: keep what was measured
        interrupted = True
    series = runner.finish()
    options_json = {**asdict(options), "budget": asdict(options.budget)}
    return {
        "machine_info": {**machine_info(), "tck": runner.environment},
        "commit_info": commit_info(),
        "benchmarks": runner.benchmarks,
        "datetime": datetime.now(timezone.utc).isoformat(),
        "version": _pytest_benchmark_version(),
        "tck": {
            "schema": SCHEMA,
            "kind": "bench",
            "adapter": adapter.name,
            "interrupted": interrupted,  # the sweep stopped early: the points before it
            "options": options_json,
            "environment": runner.environment,
            "duration_s": time.time() - began,
            "peaks": {
                "nominal": (
                    {"name": runner.nominal[0], "tflops": runner.nominal[1]}
                    if runner.nominal
                    else None
                ),
                "tf32": runner.tf32,
                "matmul": runner.matmul,
            },
            "series": series,
            "skipped": runner.skipped,
            "do_bench": (
                "triton.testing.do_bench(fn, warmup=25, rep=100, return_mode='median')"
                if runner.do_bench
                else None
            ),
        },
    }
