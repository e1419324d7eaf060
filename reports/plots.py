"""Inline SVG pictures for the reports (matplotlib, Agg; no files, no network).

Every label drawn comes from our own vocabulary (dtypes, component names, numbers):
matplotlib writes text into SVG comments and ids, so adapter-supplied strings never reach
a plot.
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from typing import Any

from tck.reference import COMPONENTS

_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "tck"  # stable ids: the same results, the same page
    matplotlib.rcParams["svg.fonttype"] = "none"
    import matplotlib.pyplot as plt

    return plt


def _svg(fig) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    _pyplot().close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and doctype: it goes inline


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def ratio_per_dtype(results: list[dict[str, Any]]) -> str | None:
    """Each result's error / bound ratio, one column per dtype (pass iff <= 1)."""
    columns: dict[str, list[float]] = defaultdict(list)
    for r in results:
        ratio = _number(r.get("metrics", {}).get("ratio"))
        if ratio is not None and r["status"] in ("pass", "fail", "convention"):
            dtype = str(r["metrics"].get("dtype", "float64"))
            columns[dtype if dtype.isidentifier() else "other"].append(max(ratio, 1e-12))
    if not columns:
        return None
    plt = _pyplot()
    order = [d for d in ("float64", "float32", "float16", "bfloat16") if d in columns]
    order += sorted(set(columns) - set(order))
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    for i, dtype in enumerate(order):
        ys = sorted(columns[dtype])
        xs = [i + 0.3 * ((j % 7) / 6 - 0.5) for j in range(len(ys))]  # deterministic jitter
        ax.scatter(xs, ys, s=10, alpha=0.6, color=_COLOURS[i % len(_COLOURS)])
    ax.axhline(1.0, color="#d62728", linewidth=1, linestyle="--", label="bound (ratio 1)")
    ax.set_yscale("log")
    ax.set_xticks(range(len(order)), [f"{d}\n({len(columns[d])})" for d in order])
    ax.set_ylabel("max error / bound")
    ax.set_title("Error ratio per dtype (below the line passes)")
    _legend_outside(ax)
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig)


def ref_multiple_per_dtype(results: list[dict[str, Any]]) -> str | None:
    """Each lower-precision comparison's error as a multiple of the careful run's error
    in the same dtype (SPEC.md §10.10), one column per dtype, with the multiplier k drawn."""
    columns: dict[str, list[float]] = defaultdict(list)
    ks: set[float] = set()
    for r in results:
        metrics = r.get("metrics", {})
        multiple = _number(metrics.get("ref_multiple"))
        if multiple is not None and r["status"] in ("pass", "fail", "convention"):
            dtype = str(metrics.get("dtype", "other"))
            columns[dtype if dtype.isidentifier() else "other"].append(max(multiple, 1e-6))
            k = _number(metrics.get("k"))
            if k is not None:
                ks.add(k)
    if not columns:
        return None
    plt = _pyplot()
    order = [d for d in ("float32", "float16", "bfloat16") if d in columns]
    order += sorted(set(columns) - set(order))
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    for i, dtype in enumerate(order):
        ys = sorted(columns[dtype])
        xs = [i + 0.3 * ((j % 7) / 6 - 0.5) for j in range(len(ys))]  # deterministic jitter
        ax.scatter(xs, ys, s=10, alpha=0.6, color=_COLOURS[(i + 1) % len(_COLOURS)])
    dashes = ["--", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 1))]
    for j, k in enumerate(sorted(ks)):  # each component class has its own multiplier k
        style = dashes[j % len(dashes)]
        ax.axhline(k, color="#d62728", linewidth=1, linestyle=style, label=f"bound k = {k:g}")
    ax.axhline(1.0, color="#2ca02c", linewidth=1, linestyle=":", label="careful run's error")
    ax.set_yscale("log")
    ax.set_xticks(range(len(order)), [f"{d}\n({len(columns[d])})" for d in order])
    ax.set_ylabel("error / careful run's error")
    ax.set_title("Error as a multiple of the careful run's (below its k passes)")
    _legend_outside(ax)
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig)


def error_vs_length(results: list[dict[str, Any]]) -> str | None:
    """Float64 oracle comparisons: each call's error as a multiple of its bound against the
    sequence length, per component (below 1 passes). Lower precisions have their own
    pictures above: mixed in here, their errors would read as float64 failures."""
    series: dict[str, dict[int, float]] = defaultdict(dict)
    for r in results:
        if str(r.get("metrics", {}).get("dtype", "float64")) != "float64":
            continue
        component = r["component"] if r["component"] in COMPONENTS else "other"
        for call in r.get("metrics", {}).get("calls", []) or []:
            length, ratio = call.get("seq_len"), _number(call.get("ratio"))
            if isinstance(length, int) and ratio is not None:
                points = series[component]
                points[length] = max(points.get(length, 0.0), max(ratio, 1e-12))
    series = {c: p for c, p in series.items() if len(p) > 1}
    if not series:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for i, (component, points) in enumerate(sorted(series.items())):
        xs = sorted(points)
        style = "-o" if i < len(_COLOURS) else "--s"
        ax.plot(
            xs,
            [points[x] for x in xs],
            style,
            markersize=3,
            linewidth=1,
            label=component,
            color=_COLOURS[i % len(_COLOURS)],
        )
    ax.axhline(1.0, color="#d62728", linewidth=1, linestyle="--", label="bound (ratio 1)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("sequence length (queries)")
    ax.set_ylabel("max error / bound")
    ax.set_title("Float64 oracle comparisons by length (below the line passes)")
    _legend_outside(ax, fontsize=7)
    ax.grid(alpha=0.3)
    return _svg(fig)


def _legend_outside(ax, fontsize: int = 8) -> None:
    """The legend beside the axes, where it never covers a point."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=fontsize, frameon=False)
