"""The HTML page of a ``tck bench`` run, from its bench.json (pytest-benchmark layout).

    from tck.reports.bench import load_bench, render_bench
    html = render_bench(load_bench("reports/out/bench/torch.nn/bench.json"))

Same style as the conformance report (the shared stylesheet, inline SVG, no network).
jinja2 autoescapes every value; plot labels come from our own vocabulary (components,
baseline names, dtypes): an adapter's own names appear in the tables only.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from markupsafe import Markup

from tck.usage import read_user_json

from . import ReportError
from .html import _environment
from .plots import _COLOURS, _pyplot, _svg

_MIB = 2**20
# What a memory growth exponent says (SPEC-free: a reading of the fit, not a check).
_LINEAR, _QUADRATIC = 1.3, 1.7
_BASELINE_NAME = re.compile(r"sdpa\[[a-z]+\]|oracle:[a-z_]+")


def load_bench(path: str | Path) -> dict[str, Any]:
    """A bench.json written by ``tck bench``; ReportError saying why when it is not one."""
    path = Path(path)
    document = read_user_json(
        path, what=str(path), hint="write it with 'tck bench --out DIR'", error=ReportError
    )
    if not isinstance(document, dict) or not isinstance(document.get("tck"), dict):
        raise ReportError(f"{path} is not a tck bench file: no 'tck' section")
    if document["tck"].get("kind") != "bench" or "benchmarks" not in document:
        raise ReportError(f"{path} is not a tck bench file")
    return document


# ------------------------------------------------------------------------- formatting


def _finite(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def fmt_ms(seconds: Any) -> str:
    value = _finite(seconds)
    return "" if value is None else f"{value * 1e3:.4g}"


def fmt_num(value: Any, digits: int = 3) -> str:
    value = _finite(value)
    return "" if value is None else f"{value:.{digits}g}"


def fmt_pct(value: Any) -> str:
    value = _finite(value)
    return "" if value is None else f"{value:.1f}%"


def fmt_mib(value: Any) -> str:
    value = _finite(value)
    return "" if value is None else f"{value / _MIB:.3g}"


def memory_reading(exponent: Any) -> str:
    value = _finite(exponent)
    if value is None:
        return "not fitted (fewer than 3 measurable points)"
    if value < _LINEAR:
        return "about linear in N (no N x N matrix kept)"
    if value > _QUADRATIC:
        return "about quadratic in N (the N x N matrix is materialised)"
    return "between linear and quadratic over this range"


# ----------------------------------------------------------------------------- plots


def _plot_labels(series: list[dict[str, Any]], components: dict[str, str]) -> dict[str, str]:
    """provider -> a legend label from our vocabulary: baselines by their own names, the
    adapter's series as 'adapter <component>' (numbered when one component has several)."""
    labels: dict[str, str] = {}
    count: dict[str, int] = defaultdict(int)
    for s in series:
        provider = s["provider"]
        if provider in labels:
            continue
        if s["kind"] == "baseline":
            labels[provider] = provider if _BASELINE_NAME.fullmatch(provider) else "baseline"
            continue
        component = components.get(provider, "component")
        count[component] += 1
        labels[provider] = f"adapter {component}" + (
            f" #{count[component]}" if count[component] > 1 else ""
        )
    return labels


def _lines(ax, series, labels, values, colour_of) -> None:
    for s in series:
        points = [(n, v) for n, v in zip(s["seq_lens"], values(s), strict=True) if _finite(v)]
        if not points:
            continue
        xs, ys = zip(*points, strict=True)
        style = "--s" if s["kind"] == "baseline" else "-o"
        ax.plot(
            xs,
            ys,
            style,
            markersize=3,
            linewidth=1.2,
            label=labels[s["provider"]],
            color=colour_of(s["provider"]),
        )


def _figure(title: str, ylabel: str):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.6, 3.3))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length N")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    return fig, ax


def configuration_plots(
    series: list[dict[str, Any]],
    labels: dict[str, str],
    *,
    nominal_tflops: float | None,
    matmul_tflops: float | None,
) -> list[str]:
    """Latency, TFLOP/s (with the peak lines) and memory against N, as inline SVG."""
    providers = sorted({s["provider"] for s in series})
    colour_of = {p: _COLOURS[i % len(_COLOURS)] for i, p in enumerate(providers)}.__getitem__
    svgs = []
    fig, ax = _figure("Latency (median)", "ms")
    _lines(ax, series, labels, lambda s: [t * 1e3 for t in s["median_s"]], colour_of)
    ax.legend(fontsize=7)
    svgs.append(_svg(fig))
    fig, ax = _figure("Throughput", "TFLOP/s")
    _lines(ax, series, labels, lambda s: s["tflops"], colour_of)
    if nominal_tflops:
        ax.axhline(
            nominal_tflops, color="#d62728", linestyle="--", linewidth=1, label="nominal peak"
        )
    if matmul_tflops:
        ax.axhline(
            matmul_tflops, color="#555555", linestyle=":", linewidth=1, label="matmul (measured)"
        )
    ax.legend(fontsize=7)
    svgs.append(_svg(fig))
    fig, ax = _figure("Peak memory", "MiB")
    _lines(
        ax,
        series,
        labels,
        lambda s: [b / _MIB if b else None for b in s["peak_memory_bytes"]],
        colour_of,
    )
    if ax.lines:
        ax.legend(fontsize=7)
    svgs.append(_svg(fig))
    return svgs


# ---------------------------------------------------------------------------- context


def _rows(benchmarks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for b in benchmarks:
        e, st = b["extra_info"], b["stats"]
        rows.append({"name": b["name"], "stats": st, "e": e})
    rows.sort(key=lambda r: (r["e"]["seq_len"], r["e"]["kind"] != "adapter", r["e"]["provider"]))
    return rows


def bench_context(document: dict[str, Any]) -> dict[str, Any]:
    tck = document["tck"]
    benchmarks = document["benchmarks"]
    components = {b["extra_info"]["provider"]: b["extra_info"]["component"] for b in benchmarks}
    series = tck.get("series", [])
    labels = _plot_labels(series, components)
    nominal = (tck.get("peaks") or {}).get("nominal") or {}
    matmul = (tck.get("peaks") or {}).get("matmul") or {}
    tf32 = (tck.get("peaks") or {}).get("tf32", False)
    by_configuration: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for b in benchmarks:
        by_configuration[b["extra_info"]["configuration"]].append(b)
    configurations = []
    for name in sorted(by_configuration):
        members = by_configuration[name]
        e0 = members[0]["extra_info"]
        dtype = e0["dtype"]
        in_config = [
            s
            for s in series
            if (s["dtype"], s["pass"], s["batch"], s["causal"])
            == (dtype, e0["pass"], e0["batch"], e0["causal"])
        ]
        key = "tf32" if dtype == "float32" and tf32 else dtype
        nominal_tflops = (nominal.get("tflops") or {}).get(key)
        matmul_tflops = (matmul.get(dtype) or {}).get("tflops")
        # The oracle runs on the CPU: a GPU's peaks are not its yardstick.
        off_device = all(s["provider"].startswith("oracle:") for s in in_config) and (
            tck.get("environment", {}).get("device", "cpu") != "cpu"
        )
        if off_device:
            nominal_tflops = matmul_tflops = None
        plots = configuration_plots(
            in_config, labels, nominal_tflops=nominal_tflops, matmul_tflops=matmul_tflops
        )
        baselines = sorted({p for m in members for p in m["extra_info"]["ratios"]})
        configurations.append(
            {
                "name": name,
                "rows": _rows(members),
                "baselines": baselines,
                "plots": [Markup(svg) for svg in plots],
                "nominal_tflops": nominal_tflops,
                "matmul_tflops": matmul_tflops,
                "do_bench": any(m["extra_info"].get("do_bench_median_s") for m in members),
            }
        )
    headline = []
    for s in series:
        if s["kind"] != "adapter" or not s["seq_lens"]:
            continue
        last = max(range(len(s["seq_lens"])), key=lambda i: s["seq_lens"][i])
        match = next(
            (
                b
                for b in benchmarks
                if (
                    b["extra_info"]["provider"],
                    b["extra_info"]["dtype"],
                    b["extra_info"]["pass"],
                    b["extra_info"]["batch"],
                    b["extra_info"]["seq_len"],
                )
                == (s["provider"], s["dtype"], s["pass"], s["batch"], s["seq_lens"][last])
            ),
            None,
        )
        if match is None:  # a hand-edited file: the series names a point it lacks
            continue
        headline.append({"series": s, "e": match["extra_info"], "stats": match["stats"]})
    return {
        "doc": document,
        "tck": tck,
        "env": tck.get("environment", {}),
        "machine": document.get("machine_info", {}),
        "commit": document.get("commit_info", {}),
        "options": tck.get("options", {}),
        "nominal": nominal,
        "matmul": matmul,
        "series": series,
        "headline": headline,
        "configurations": configurations,
        "skipped": tck.get("skipped", []),
        "flush_bytes": max(
            (b["extra_info"].get("l2_flush_bytes") or 0 for b in benchmarks), default=0
        ),
        "ms": fmt_ms,
        "num": fmt_num,
        "pct": fmt_pct,
        "mib": fmt_mib,
        "reading": memory_reading,
    }


def render_bench(document: dict[str, Any]) -> str:
    return _environment().get_template("bench.html.j2").render(**bench_context(document))
