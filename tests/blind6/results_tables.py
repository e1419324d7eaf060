# ruff: noqa: E501, E731
"""Markdown tables of a results_*.json written by tests/blind/run.py --json (for RESULTS.md).

python tests/blind6/results_tables.py tests/blind6/results_before.json
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def main(path: str) -> None:
    data = json.load(open(path, encoding="utf-8"))
    t = data["totals"]
    print(
        f"git_head {data['git_head']}, bugs_sha256 {data['bugs_sha256']}, "
        f"controls_sha256 {data['controls_sha256']}, complete {data['complete']}\n"
    )
    print(
        "| bugs | detected | right class first | right class among causes | with expected codes | controls passed | runner errors |"
    )
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {t['bugs']} | {t['detected']} | {t['right_class_first']} | {t['right_class_anywhere']} | "
        f"{t['bugs_with_expected_codes']} | {t['controls_passed']}/{t['controls']} | {t['runner_errors']} |\n"
    )
    for key in ("family", "impl"):
        groups = defaultdict(list)
        for b in data["bugs"]:
            groups[b[key]].append(b)
        print(f"| {key} | bugs | detected | right first | among causes |")
        print("|---|---|---|---|---|")
        for name, rows in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            print(
                f"| {name} | {len(rows)} | {sum(r['detected'] for r in rows)} | "
                f"{sum(r['right_class_first'] for r in rows)} | {sum(r['right_class_anywhere'] for r in rows)} |"
            )
        print()
    print("| bug | family | expected | first cause | detected | right first | among causes | s |")
    print("|---|---|---|---|---|---|---|---|")
    for b in data["bugs"]:
        expected = (
            ", ".join(f"`{c}`" for c in b["expected_codes"]) or f"(none: {b['class_without_code']})"
        )
        mark = lambda v: "yes" if v else "no"
        print(
            f"| `{b['id']}` | {b['family']} | {expected} | `{b['first_cause']}` | {mark(b['detected'])} | "
            f"{mark(b['right_class_first'])} | {mark(b['right_class_anywhere'])} | {b['duration_s']} |"
        )
    print()
    print("| control | passed | failing rows | causes | s |")
    print("|---|---|---|---|---|")
    for c in data["controls"]:
        print(
            f"| `{c['id']}` | {'yes' if c['passed'] else 'no'} | {c['failing']} | "
            f"{', '.join(c['causes']) or '-'} | {c['duration_s']} |"
        )
    durations = [b["duration_s"] or 0 for b in data["bugs"]] + [
        c["duration_s"] or 0 for c in data["controls"]
    ]
    print(
        f"\nrun time: {sum(durations):.0f} s over {len(durations)} runs, "
        f"mean {sum(durations) / len(durations):.1f} s, max {max(durations):.1f} s"
    )


if __name__ == "__main__":
    main(sys.argv[1])
