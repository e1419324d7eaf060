"""The pytest-benchmark suite: the adapter's attention and mha beside SDPA's backends.

Timed by pytest-benchmark (perf_counter; on CUDA each call ends with a synchronize, so the
figure includes launch overhead: ``tck bench`` times kernels with CUDA events instead).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tck.adapters import Unsupported, load_adapter
from tck.bench import peak_memory
from tck.bench.runner import BenchOptions
from tck.bench.workloads import SDPA_BACKENDS, Call, adapter_call, sdpa_call

COMPONENTS = ("attention", "mha")


def _config(settings: dict[str, Any], seq: int):
    return BenchOptions(d_model=settings["d_model"], heads=settings["heads"], seqs=(seq,)).config()


def _time(benchmark: Any, call: Call, device: str, seq: int) -> None:
    cuda = device.startswith("cuda")

    def timed() -> Any:
        out = call.fn()
        if cuda:
            torch.cuda.synchronize(device)
        return out

    benchmark.group = f"{call.dtype} {call.pass_} N={seq}"
    with call.context():
        benchmark(timed)
        peak = peak_memory(call.fn, device)
    benchmark.extra_info.update(
        provider=call.label,
        component=call.component,
        dtype=call.dtype,
        pass_=call.pass_,
        seq_len=seq,
        flops=call.flops,
        peak_memory_bytes=peak,
    )
    if benchmark.stats:  # None under --benchmark-disable
        benchmark.extra_info["tflops"] = call.flops / benchmark.stats.stats.median / 1e12


@pytest.mark.parametrize("component", COMPONENTS)
def test_adapter(benchmark, bench_settings, component, seq, dtype, pass_):
    adapter = load_adapter(bench_settings["adapter"])
    subject = next((s for s in adapter.subjects() if s.component == component), None)
    if subject is None:
        pytest.skip(f"{adapter.name} offers no {component}")
    try:
        call = adapter_call(
            adapter,
            subject,
            _config(bench_settings, seq),
            batch=1,
            seq=seq,
            dtype=dtype,
            pass_=pass_,
            causal=False,
            device=bench_settings["device"],
        )
    except Unsupported as err:
        pytest.skip(str(err))
    _time(benchmark, call, bench_settings["device"], seq)


@pytest.mark.parametrize("backend", list(SDPA_BACKENDS))
def test_sdpa(benchmark, bench_settings, backend, seq, dtype, pass_):
    config = _config(bench_settings, seq)
    try:
        call = sdpa_call(
            backend,
            batch=1,
            heads=config.n_heads,
            seq=seq,
            head_dim=config.head_dim_k,
            dtype=dtype,
            pass_=pass_,
            causal=False,
            device=bench_settings["device"],
        )
    except Unsupported as err:
        pytest.skip(str(err))
    _time(benchmark, call, bench_settings["device"], seq)
