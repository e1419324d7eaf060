"""Options of the pytest-benchmark suite (``tox -e bench``; ``pytest benchmarks``).

    pytest benchmarks --benchmark-json=out.json --tck-bench-seq=128,256 --tck-bench-device=cpu

Each benchmark's ``extra_info`` carries the analytic FLOPs, TFLOP/s and the peak memory,
the same fields ``tck bench`` writes. ``tck bench`` is the precise instrument (CUDA
events, L2 flush, the stopping rule of tck.bench.timing); this suite is for projects that
track regressions with pytest-benchmark (``--benchmark-autosave``/``--benchmark-compare``).
"""

from __future__ import annotations

import pytest

from tck.bench.cli import check_device, parse_dtypes, parse_ints, parse_passes


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tck-bench", "tck benchmark suite")
    group.addoption("--tck-bench-adapter", default="torch.nn", help="adapter (default torch.nn)")
    group.addoption("--tck-bench-device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    group.addoption("--tck-bench-seq", default="64,128", help="sequence lengths (default 64,128)")
    group.addoption("--tck-bench-dtypes", default="fp32", help="dtypes (default fp32)")
    group.addoption("--tck-bench-passes", default="fwd,fwd+bwd", help="fwd, fwd+bwd")
    group.addoption("--tck-bench-d-model", type=int, default=128, help="width (default 128)")
    group.addoption("--tck-bench-heads", type=int, default=4, help="heads (default 4)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    option = metafunc.config.getoption
    axes = {
        "seq": parse_ints(option("--tck-bench-seq"), "--tck-bench-seq"),
        "dtype": parse_dtypes(option("--tck-bench-dtypes")),
        "pass_": parse_passes(option("--tck-bench-passes")),
    }
    for name, values in axes.items():
        if name in metafunc.fixturenames:
            metafunc.parametrize(name, values, ids=[str(v) for v in values])


@pytest.fixture(scope="session")
def bench_settings(pytestconfig: pytest.Config) -> dict:
    option = pytestconfig.getoption
    return {
        "adapter": option("--tck-bench-adapter"),
        "device": check_device(option("--tck-bench-device")),
        "d_model": option("--tck-bench-d-model"),
        "heads": option("--tck-bench-heads"),
    }
