"""Merge run.py --json files of one set, measured by the same tck, into one results file (the
"before" run was split over runner processes to finish inside the session). A row measured in
two parts keeps the first part's (in command-line order) and says so. Rows are ordered as in
bugs.json and controls.json; totals are recomputed by run.py's own writer.

    python tests/blind5/merge_results.py OUT.json PART.json [PART.json ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "blind"))
import run  # noqa: E402  (tests/blind/run.py: the tables' loaders and the JSON writer)


def main() -> int:
    out, *parts = (Path(p) for p in sys.argv[1:])
    loaded = [json.loads(p.read_text(encoding="utf-8")) for p in parts]
    heads = {d["git_head"] for d in loaded} | {d["bugs_sha256"] for d in loaded}
    if len(heads) != 2:
        raise SystemExit(f"the parts measured different tck trees or tables: {heads}")
    rows: dict[str, dict] = {}
    for data in loaded:
        for row in [*data["bugs"], *data["controls"]]:
            if row["id"] in rows:  # the earlier part (on the command line) is kept
                print(f"{row['id']}: measured twice, the first part's row kept")
                continue
            rows[row["id"]] = row
    order = [r["id"] for r in [*run.load_bugs(HERE), *run.load_controls(HERE)]]
    missing = [i for i in order if i not in rows]
    args = argparse.Namespace(set=HERE, json=out, tck_python=loaded[0]["tck_python"])
    run._write_json(args, [rows[i] for i in order if i in rows], {}, complete=not missing)
    print(f"{len(rows)} rows merged into {out}; missing: {', '.join(missing) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
