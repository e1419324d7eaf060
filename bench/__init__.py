"""``tck bench``: how fast an adapted model is, and how far from the hardware limit.

    from tck.bench import BenchOptions, run_bench, write_bench
    document = run_bench(BenchOptions(adapter="torch.nn", device="cpu", seqs=(128, 256)))
    write_bench(document, "reports/out/bench/torch.nn")   # bench.json + index.html

The method (timers, statistics, FLOPs, peaks, memory) is in docs/benchmarks/README.md;
the JSON follows pytest-benchmark's layout, so ``pytest-benchmark compare`` reads it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .runner import BenchOptions, run_bench
from .timing import Budget, growth_exponent, measure, peak_memory, summarize

__all__ = [
    "BenchOptions",
    "Budget",
    "growth_exponent",
    "measure",
    "peak_memory",
    "run_bench",
    "summarize",
    "write_bench",
]


def write_bench(document: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write OUT/bench.json and OUT/index.html (the HTML report of tck.reports.bench)."""
    from tck.reports.bench import render_bench

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "bench.json", "html": out / "index.html"}
    paths["json"].write_text(json.dumps(document, indent=2, allow_nan=False), encoding="utf-8")
    paths["html"].write_text(render_bench(document), encoding="utf-8")
    return paths
