"""The tables of a committed GPU evidence folder, read from its own files.

    python scripts/gpu_tables.py docs/benchmarks/h200-2026-11-30

prints Markdown: the conformance verdict of each adapter (conformance/ADAPTER/results.json,
written by tck run) and, for each bench-*/bench.json, one row per series at chosen lengths:
median, TFLOP/s, share of the large matmul measured in the same run, peak memory, the
memory growth exponent, and our median over triton.testing.do_bench's. The figures in
the folder's README.md are pasted from this output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

LENGTHS = (512, 4096, 16384)


def conformance_table(folder: Path) -> list[str]:
    rows = [
        "| adapter | passed | failed | errors | skipped | conventions | verified nothing on |",
        "|---|---|---|---|---|---|---|",
    ]
    for path in sorted((folder / "conformance").glob("*/results.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        s = doc["summary"]
        unverified = ", ".join(doc.get("unverified_subjects") or []) or "-"
        rows.append(
            f"| {doc['adapter']['name']} | {s['passed']} | {s['failed']} | {s['errors']} | "
            f"{s['skipped']} | {s['conventions']} | {unverified} |"
        )
    return rows


def failures(folder: Path) -> list[str]:
    rows = ["| adapter | subject | check | code |", "|---|---|---|---|"]
    for path in sorted((folder / "conformance").glob("*/results.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        for r in doc["results"]:
            if r["status"] in ("fail", "error"):
                code = (r.get("diagnosis") or {}).get("code", "")
                rows.append(
                    f"| {doc['adapter']['name']} | {r['subject']} | {r['check']} | `{code}` |"
                )
    return rows


def _at(series: dict[str, Any], key: str, n: int) -> Any:
    lengths = series["seq_lens"]
    return series[key][lengths.index(n)] if n in lengths else None


def bench_table(path: Path) -> list[str]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    tck = doc["tck"]
    matmul = {d: m.get("tflops") for d, m in tck["peaks"]["matmul"].items()}
    by_key = {
        (b["extra_info"]["provider"], b["extra_info"]["pass"], b["extra_info"]["seq_len"]): b
        for b in doc["benchmarks"]
    }
    peak = ", ".join(f"{d} {t:.0f} TFLOP/s" for d, t in matmul.items() if t)
    rows = [
        f"`{path.parent.name}`: {tck['adapter']}, matmul measured in the same run: {peak}"
        + (" (interrupted)" if tck.get("interrupted") else ""),
        "",
        "| series | pass | N | median ms | TFLOP/s | % matmul | peak MiB | mem. exponent "
        "| ours / do_bench |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for series in tck["series"]:
        for n in LENGTHS:
            median = _at(series, "median_s", n)
            if median is None:
                continue
            extra = by_key[(series["provider"], series["pass"], n)]["extra_info"]
            memory = _at(series, "peak_memory_bytes", n)
            exponent = series.get("memory_exponent")
            ratio = extra.get("ratio_to_do_bench")
            rows.append(
                f"| {series['provider']} | {series['pass']} | {n} | {median * 1e3:.3f} | "
                f"{extra['tflops']:.0f} | {extra.get('pct_matmul_peak') or 0:.0f} | "
                f"{memory / 2**20:.0f} | "
                f"{'-' if exponent is None else f'{exponent:.2f}'} | "
                f"{'-' if ratio is None else f'{ratio:.2f}'} |"
            )
    return rows


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python scripts/gpu_tables.py FOLDER (a GPU evidence folder)", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    out = ["## Conformance", "", *conformance_table(folder), "", *failures(folder), ""]
    for path in sorted(folder.glob("bench-*/bench.json")):
        out += ["## " + path.parent.name, "", *bench_table(path), ""]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
