"""Compare two tck results.json: the same check ids (check, subject), the same verdicts,
clauses, diagnosis codes and metrics. Used to show a refactor changes no public result:
``python scripts/compare_check_ids.py BEFORE/results.json AFTER/results.json``.

``--allow-new`` accepts results only AFTER has (a component added since BEFORE); every id
BEFORE has must still be there with the same verdict. Exit 0 when they agree, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def _rows(path: Path) -> Counter:
    results = json.loads(path.read_text(encoding="utf-8"))["results"]
    return Counter(
        (
            r["check"],
            r["subject"],
            r["status"],
            tuple(r["clause"]),
            r["diagnosis"]["code"],
            json.dumps(r["metrics"], sort_keys=True),
        )
        for r in results
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--allow-new", action="store_true")
    args = parser.parse_args(argv)
    before, after = _rows(args.before), _rows(args.after)
    ids_before = {row[:2] for row in before}
    ids_after = {row[:2] for row in after}
    lost = sorted(ids_before - ids_after)
    new = sorted(ids_after - ids_before)
    changed = sorted(
        {row[:2] for row in (before - after) + (after - before) if row[:2] in ids_before}
    )
    print(f"{sum(before.values())} results before, {sum(after.values())} after")
    print(f"ids only before: {len(lost)} {lost[:10]}")
    print(f"ids only after: {len(new)} {new[:10]}")
    print(f"ids whose verdict, clauses, code or metrics changed: {len(changed)} {changed[:10]}")
    return 1 if lost or changed or (new and not args.allow_new) else 0


if __name__ == "__main__":
    raise SystemExit(main())
