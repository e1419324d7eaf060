"""tck bench: statistics, FLOPs, the memory fit, the CLI end to end at tiny sizes, its
usage errors, the HTML page's escaping, and pytest-benchmark's reading of the JSON.

No assertion here depends on how fast anything ran.
"""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tck.adapters import Adapter, Subject, Unsupported
from tck.bench import BenchOptions, Budget, growth_exponent, measure, peak_memory, run_bench
from tck.bench.cli import parse_ints
from tck.bench.peaks import nominal_peak, nominal_tflops
from tck.bench.timing import median_ci_rel, quartiles, summarize
from tck.bench.workloads import FORWARD, FORWARD_BACKWARD, NUMPY_NOTE, adapter_call, sdpa_call
from tck.cli import main
from tck.reference import Config, canonical_conventions
from tck.reference.expected import expected
from tck.reports.bench import load_bench, render_bench

TINY = [
    "--device", "cpu", "--seq", "32,...,128", "--d-model", "32", "--heads", "2",
    "--warmup", "0", "--min-rounds", "3", "--max-rounds", "20", "--min-time", "0",
    "--max-time", "0.05", "--matmul-size", "64", "--baselines", "flash,efficient,math,oracle", "-q",
]  # fmt: skip


# ------------------------------------------------------------------------- statistics


def test_quartiles_follow_tukeys_hinges():
    assert quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (1.75, 4.25)  # n % 4 == 1: method 3
    assert quartiles([1.0, 2.0, 3.0, 4.0]) == (1.5, 3.5)  # even: medians of the halves
    assert quartiles([7.0]) == (7.0, 7.0)


def test_summarize_has_pytest_benchmarks_fields():
    stats = summarize([3.0, 1.0, 2.0, 10.0, 2.0])
    assert stats["median"] == 2.0 and stats["rounds"] == 5 and stats["iterations"] == 1
    assert stats["min"] == 1.0 and stats["max"] == 10.0 and stats["total"] == 18.0
    assert stats["iqr"] == stats["q3"] - stats["q1"]
    assert stats["iqr_outliers"] == 1  # 10 is beyond Q3 + 1.5 IQR
    assert stats["hd15iqr"] == 3.0  # the highest datum within Q3 + 1.5 IQR (Tukey's whisker)
    assert stats["ld15iqr"] == 1.0
    assert stats["data"] == [3.0, 1.0, 2.0, 10.0, 2.0]  # in the order measured


def test_summarize_agrees_with_pytest_benchmark():
    pb = pytest.importorskip("pytest_benchmark.stats")
    version = tuple(
        int(p) for p in pytest.importorskip("pytest_benchmark").__version__.split(".")[:3]
    )
    # Before 5.3.1 pytest-benchmark's hd15iqr was the first datum *above* the fence (fixed
    # upstream); ours is the highest within it, as 5.3.1 and Tukey define it.
    fields = [f for f in pb.Stats.fields if f != "hd15iqr" or version >= (5, 3, 1)]
    rng = random.Random(0)
    for n in range(1, 14):
        data = [rng.lognormvariate(0, 0.3) for _ in range(n)]
        theirs = pb.Stats()
        for x in data:
            theirs.update(x)
        ours = summarize(data)
        for field in fields:
            assert ours[field] == pytest.approx(getattr(theirs, field)), (n, field)


def test_median_confidence_needs_three_samples():
    assert median_ci_rel([1.0, 1.0]) == float("inf")
    assert median_ci_rel([1.0, 1.0, 1.0, 1.0]) == 0.0
    assert median_ci_rel([1.0, 2.0, 3.0, 4.0]) == pytest.approx(1.57 * 2.0 / 2 / 2.5)


def test_growth_exponent_recovers_the_power():
    lengths = [128, 256, 512, 1024, 2048]
    rng = np.random.default_rng(0)
    noise = rng.uniform(0.97, 1.03, len(lengths))
    linear = [1000.0 * n * e for n, e in zip(lengths, noise, strict=True)]
    quadratic = [3.0 * n * n * e for n, e in zip(lengths, noise, strict=True)]
    assert growth_exponent(lengths, linear) == pytest.approx(1.0, abs=0.05)
    assert growth_exponent(lengths, quadratic) == pytest.approx(2.0, abs=0.05)


def test_growth_exponent_needs_three_measurable_points():
    assert growth_exponent([1, 2], [1.0, 2.0]) is None
    assert growth_exponent([1, 2, 4], [1.0, None, 4.0]) is None
    assert growth_exponent([1, 2, 4, 8], [0.0, 2.0, 4.0, 8.0]) == pytest.approx(1.0)


# ---------------------------------------------------------------- timers and memory


def test_measure_counts_rounds_and_warmup():
    calls = []
    budget = Budget(warmup_s=0, warmup_rounds=2, min_rounds=4, max_rounds=9, max_time_s=60)
    samples = measure(lambda: calls.append(1), "cpu", budget)
    assert 4 <= len(samples.seconds) <= 9
    assert samples.warmup_rounds == 2
    assert len(calls) == samples.warmup_rounds + len(samples.seconds)
    assert samples.timer == "perf_counter" and samples.l2_flush_bytes == 0
    assert all(s >= 0 for s in samples.seconds)


def test_measure_stops_at_max_rounds_when_the_median_never_settles():
    values = iter(range(10**6))

    def noisy() -> None:  # alternating sleep lengths: a wide IQR that never settles
        time.sleep(0.002 if next(values) % 2 else 0.0)

    budget = Budget(warmup_s=0, min_rounds=3, max_rounds=6, min_time_s=0, rel_ci=0.0)
    assert len(measure(noisy, "cpu", budget).seconds) == 6


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc")
def test_cpu_peak_memory_sees_a_transient_allocation():
    def allocate() -> float:
        block = np.ones(8 * 2**20)  # 64 MiB, touched, freed on return
        time.sleep(0.01)
        return float(block[-1])

    assert peak_memory(allocate, "cpu") >= 48 * 2**20
    assert peak_memory(lambda: None, "cpu") < 16 * 2**20


# ---------------------------------------------------------------------------- FLOPs


def test_sdpa_flops_are_4bhn2d_halved_when_causal_and_35x_with_backward():
    b, h, n, d = 2, 3, 16, 8
    kw = {"batch": b, "heads": h, "seq": n, "head_dim": d, "dtype": "float32", "device": "cpu"}
    fwd = sdpa_call("math", pass_=FORWARD, causal=False, **kw)
    assert fwd.flops == 4 * b * h * n * n * d
    assert sdpa_call("math", pass_=FORWARD, causal=True, **kw).flops == 2 * b * h * n * n * d
    assert sdpa_call("math", pass_=FORWARD_BACKWARD, causal=False, **kw).flops == 3.5 * fwd.flops


def test_adapter_call_uses_the_costs_of_the_reference():
    from tck.adapters import load_adapter
    from tck.reference.costs import flops

    adapter = load_adapter("torch.nn")
    subject = next(s for s in adapter.subjects() if s.name == "mha")
    config = Config(d_model=16, n_heads=2, d_ff=32, max_len=64)
    call = adapter_call(
        adapter, subject, config, batch=2, seq=8, dtype="float32", pass_=FORWARD_BACKWARD,
        causal=False, device="cpu",
    )  # fmt: skip
    assert call.flops == flops("mha", config, batch=2, seq_len=8, backward=True)
    grads = call.fn()  # torch.autograd.grad: one per input and parameter
    # query, key, value, then in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias
    assert len(grads) == 3 + 4
    assert all(g is not None for g in grads)


def test_nominal_peaks_match_device_names():
    assert nominal_tflops("NVIDIA H100 80GB HBM3", "bfloat16") == 989
    assert nominal_tflops("NVIDIA H100 PCIe", "bfloat16") == 756
    assert nominal_tflops("NVIDIA H200", "bfloat16") == 989
    assert nominal_tflops("NVIDIA A100-SXM4-80GB", "bfloat16") == 312
    assert nominal_tflops("NVIDIA L4", "bfloat16") == 121
    assert nominal_tflops("NVIDIA L40S", "bfloat16") == 362
    assert nominal_tflops("NVIDIA H100 80GB HBM3", "float32", tf32=True) == 495
    assert nominal_tflops("Some Future GPU", "bfloat16") is None
    # a name that contains another's ("GH200" contains "H200") matches its own row
    assert nominal_peak("NVIDIA GH200 480GB")[0] == "GH200"
    assert nominal_peak("NVIDIA H100 NVL")[0] == "H100 NVL"


def test_seq_doubling_notation():
    assert parse_ints("128,...,1024", "--seq") == (128, 256, 512, 1024)
    assert parse_ints("100,64,64", "--seq") == (64, 100)
    assert parse_ints("8,...,32,48", "--seq") == (8, 16, 32, 48)


# ------------------------------------------------------------------ the CLI, end to end


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("bench")
    assert main(["bench", "--adapter", "torch.nn", *TINY, "--out", str(out)]) == 0
    return out, json.loads((out / "bench.json").read_text())


def test_an_interrupted_sweep_keeps_the_points_before_it(monkeypatch, tmp_path, capsys):
    """Ctrl-C (or `timeout -s INT`) mid-sweep: the measured points are written, the JSON
    says interrupted, and the status is 130, never 0. On a lent GPU a sweep cut by its
    time limit otherwise left nothing but its log."""
    from tck.bench import runner

    record, calls = runner.Runner._record, []

    def stop_on_the_fourth(self, call, point):
        calls.append(call.label)
        if len(calls) == 4:
            raise KeyboardInterrupt
        record(self, call, point)

    monkeypatch.setattr(runner.Runner, "_record", stop_on_the_fourth)
    out = tmp_path / "bench"
    assert main(["bench", "--adapter", "torch.nn", *TINY, "--out", str(out)]) == 130
    doc = json.loads((out / "bench.json").read_text())
    assert doc["tck"]["interrupted"] is True
    assert len(doc["benchmarks"]) == 3
    assert "interrupted" in capsys.readouterr().err


def test_cli_writes_json_with_tflops_and_memory_per_configuration(bench_run):
    _, doc = bench_run
    assert {"machine_info", "commit_info", "benchmarks", "datetime", "version"} <= set(doc)
    labels = {b["extra_info"]["provider"] for b in doc["benchmarks"]}
    assert {"torch.nn:attention", "torch.nn:mha", "sdpa[math]", "oracle:mha"} <= labels
    for b in doc["benchmarks"]:
        e = b["extra_info"]
        assert e["tflops"] > 0 and e["flops"] > 0
        assert e["peak_memory_bytes"] is not None and e["peak_memory_bytes"] >= 0
        assert b["stats"]["rounds"] == len(b["stats"]["data"]) >= 3
        assert e["pct_matmul_peak"] is not None or e["provider"].startswith("oracle:")
    configurations = {b["group"] for b in doc["benchmarks"]}
    assert configurations == {
        "float32 forward B=1",
        "float32 forward+backward B=1",
        "float64 forward B=1",
    }
    mha = [b for b in doc["benchmarks"] if b["extra_info"]["provider"] == "torch.nn:mha"]
    assert all({"sdpa[math]"} <= set(b["extra_info"]["ratios"]) for b in mha)
    forward_mha = [b for b in mha if b["extra_info"]["pass"] == FORWARD]
    assert all("oracle:mha" in b["extra_info"]["ratios"] for b in forward_mha)
    series = doc["tck"]["series"]
    assert {s["provider"] for s in series} == labels
    assert all(len(s["seq_lens"]) == 3 for s in series)


def test_cli_writes_the_html_report(bench_run):
    out, _ = bench_run
    html = (out / "index.html").read_text()
    assert html.count("<svg") == 3 * 3  # latency, TFLOP/s, memory per configuration
    for section in ("summary", "peaks", "memory", "method", "environment", "skipped"):
        assert f'id="{section}"' in html
    assert "sdpa[efficient]" in html  # said why it was not measured on the CPU
    assert torch.__version__ in html


def test_pytest_benchmark_reads_the_json(bench_run, tmp_path):
    pytest.importorskip("pytest_benchmark")
    out, doc = bench_run
    csv = tmp_path / "table"
    result = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", str(out / "bench.json"),
         f"--csv={csv}", "--group-by=group"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = (tmp_path / "table.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + len(doc["benchmarks"])


def test_bench_html_escapes_every_name(bench_run):
    _, doc = bench_run
    evil = "<script>alert(1)</script>"
    doc = copy.deepcopy(doc)
    doc["tck"]["adapter"] = evil
    renamed = doc["tck"]["series"][0]["provider"]
    doc["tck"]["series"][0]["provider"] = evil
    for b in doc["benchmarks"]:
        if b["extra_info"]["provider"] == renamed:
            b["extra_info"].update(provider=evil, notes=[evil])
    doc["tck"]["skipped"].append(
        {"label": evil, "dtype": "float32", "pass_": "forward", "batch": 1, "seq": 1,
         "causal": False, "status": "error", "reason": evil}
    )  # fmt: skip
    html = render_bench(doc)
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_load_bench_refuses_other_files(tmp_path):
    from tck.reports import ReportError

    (tmp_path / "results.json").write_text('{"schema": 1}')
    with pytest.raises(ReportError, match="not a tck bench file"):
        load_bench(tmp_path / "results.json")
    with pytest.raises(ReportError, match="no such file"):
        load_bench(tmp_path / "missing.json")


# ------------------------------------------------------------------------ usage errors


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--components", "attention,nope"], "cannot benchmark 'nope'"),
        (["--components", "vit"], "cannot benchmark 'vit'"),
        (["--seq", "0"], "'0' is not a whole number >= 1"),
        (["--seq", "abc"], "'abc' is not a whole number"),
        (["--seq", "100,...,300"], "300 is not 100 times a power of 2"),
        (["--seq", "...,64"], "'...' needs a number on each side"),
        (["--dtypes", "fp8"], "unknown dtype 'fp8'"),
        (["--passes", "sideways"], "unknown pass 'sideways'"),
        (["--baselines", "fastest"], "unknown baseline(s) fastest"),
        (["--device", "tpu"], "unknown --device 'tpu'"),
        (["--d-model", "30", "--heads", "4"], "must be a positive multiple of --heads"),
        (["--compare-do-bench", "yes"], "needs --device cuda"),
    ],
)
def test_usage_errors_are_one_line(capsys, tmp_path, args, message):
    code = main(
        ["bench", "--adapter", "torch.nn", "--device", "cpu", *args, "--out", str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert err.count("\n") == 1 and err.startswith("tck: error:")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_says_use_cpu(capsys, tmp_path):
    assert main(["bench", "--device", "cuda", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "use --device cpu" in err and err.count("\n") == 1


def test_bf16_on_a_gpu_without_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100-SXM2-16GB")
    code = main(["bench", "--device", "cuda", "--dtypes", "bf16", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "Tesla V100-SXM2-16GB has no bfloat16" in err
    assert "--dtypes fp16,fp32" in err


def test_unwritable_out(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = main(["bench", *TINY, "--out", str(blocker / "sub")])
    err = capsys.readouterr().err
    assert code == 2 and "cannot write to --out" in err and err.count("\n") == 1


def test_dtype_the_adapter_does_not_offer(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("tck.bench.cli.load_adapter", lambda spec: NumpyAttention())
    code = main(
        ["bench", "--adapter", "x", *TINY, "--components", "attention", "--dtypes", "fp32",
         "--out", str(tmp_path)]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "offers float64, not float32" in err


# -------------------------------------------------------------- sweeps' special paths


class NumpyAttention(Adapter):
    """A non-torch adapter: the oracle's attention behind the numpy boundary."""

    name = "numpy-attention"

    def subjects(self) -> list[Subject]:
        return [Subject("attention", "attention")]

    def build(self, subject, config, *, seed):
        return config

    def run(self, handle, inputs):
        conventions = canonical_conventions("attention")
        return expected("attention", inputs, None, handle, conventions)


def _tiny(**changes) -> BenchOptions:
    base = BenchOptions(
        components=("attention",),
        dtypes=("float64",),
        seqs=(16, 32),
        d_model=16,
        heads=2,
        baselines=(),
        budget=Budget(warmup_s=0, min_rounds=3, max_rounds=5, min_time_s=0, max_time_s=0.05),
        matmul_size=32,
    )
    return BenchOptions(**{**base.__dict__, **changes})


def test_a_numpy_adapter_is_timed_through_run_and_says_so():
    doc = run_bench(_tiny(), NumpyAttention())
    forward = [b for b in doc["benchmarks"] if b["extra_info"]["pass"] == FORWARD]
    assert len(forward) == 2 and all(NUMPY_NOTE in b["extra_info"]["notes"] for b in forward)
    (skip,) = [s for s in doc["tck"]["skipped"] if s["pass_"] == FORWARD_BACKWARD]
    assert skip["status"] == "unsupported" and "gradients" in skip["reason"]


def test_a_series_stops_at_the_first_too_slow_n():
    doc = run_bench(_tiny(adapter="torch.nn", max_call_s=1e-12, passes=(FORWARD,)))
    assert doc["benchmarks"] == []
    (skip,) = doc["tck"]["skipped"]
    assert skip["status"] == "too_slow" and skip["seq"] == 16 and "--max-call-s" in skip["reason"]


def test_unsupported_is_raised_for_a_dtype_not_offered():
    with pytest.raises(Unsupported, match="offers float64"):
        adapter_call(
            NumpyAttention(), Subject("attention", "attention"), Config(d_model=16, n_heads=2),
            batch=1, seq=8, dtype="float32", pass_=FORWARD, causal=False, device="cpu",
        )  # fmt: skip
