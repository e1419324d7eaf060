"""Markdown tables of a blind-5 result file (run.py --json): totals, by family, by
implementation, every bug's first root cause, the controls and the run times.

    python tests/blind5/results_tables.py tests/blind5/results_before.json
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _grouped(bugs: list[dict[str, Any]], key: str, title: str) -> str:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for bug in bugs:
        groups[bug[key] or "-"].append(bug)
    rows = [
        [
            name,
            str(len(members)),
            str(sum(m["detected"] for m in members)),
            str(sum(m["right_class_first"] for m in members)),
            str(sum(m["right_class_anywhere"] for m in members)),
        ]
        for name, members in sorted(groups.items())
    ]
    return _table([title, "bugs", "detected", "right class first", "among causes"], rows)


def render(data: dict[str, Any]) -> str:
    bugs, controls, totals = data["bugs"], data["controls"], data["totals"]
    durations = [b["duration_s"] for b in [*bugs, *controls] if b.get("duration_s") is not None]
    out = [
        f"- tck measured: git HEAD `{data['git_head']}` ({data['tck_python']})",
        f"- bugs.json sha256 `{data['bugs_sha256']}`",
        f"- controls.json sha256 `{data['controls_sha256']}`",
        f"- complete: {data['complete']}",
        "",
        _table(
            ["measure", "count"],
            [
                ["bugs", str(totals["bugs"])],
                ["detected", str(totals["detected"])],
                ["right class first", str(totals["right_class_first"])],
                ["right class among the root causes", str(totals["right_class_anywhere"])],
                ["bugs a code names", str(totals["bugs_with_expected_codes"])],
                ["runner errors", str(totals["runner_errors"])],
                ["controls passed", f"{totals['controls_passed']}/{totals['controls']}"],
            ],
        ),
        "",
        "By family:",
        "",
        _grouped(bugs, "family", "family"),
        "",
        "By implementation:",
        "",
        _grouped(bugs, "impl", "implementation"),
        "",
        "Every bug:",
        "",
        _table(
            ["bug", "detected", "first root cause", "right first", "expected", "seconds"],
            [
                [
                    b["id"],
                    "yes" if b["detected"] else "no",
                    f"`{b['first_cause']}`" if b["first_cause"] else "-",
                    "yes" if b["right_class_first"] else "no",
                    ", ".join(f"`{c}`" for c in b["expected_codes"])
                    or f"(no code: {b['class_without_code']})",
                    str(b["duration_s"]),
                ]
                for b in bugs
            ],
        ),
        "",
        "Controls:",
        "",
        _table(
            ["control", "failing rows", "passed", "root causes", "seconds"],
            [
                [
                    c["id"],
                    str(c["failing"]),
                    "yes" if c["passed"] else "no",
                    ", ".join(f"`{x}`" for x in c["causes"]) or "-",
                    str(c["duration_s"]),
                ]
                for c in controls
            ],
        ),
    ]
    if durations:
        out += [
            "",
            f"Run time: {sum(durations):.0f} s of `tck run` for {len(durations)} runs, "
            f"{sum(durations) / len(durations):.1f} s each on average "
            f"(min {min(durations):.0f}, max {max(durations):.0f}), --jobs 1.",
        ]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))), end="")
