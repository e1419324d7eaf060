"""The thirty-sixth blind benchmark's tables are well formed (no tck run here: run.py does that).

Each bug and each control is one line of its implementation replaced, the line occurs exactly
once at the row's line number, the patched file still compiles, every row names components
its implementation's adapter offers, and the JSON tables are make_bugs.py's output. This set
was frozen in two phases (PROTOCOL.md): in phase 1 every bug has neither expected codes nor a
class without a code; from phase 2 on each bug has exactly one of them, its codes exist in the
registry of diagnosis codes and none is generic. The shared checks are tests/blind/setkit.py's.
Adapted from set 27's table test: 40 to 50 bugs, at least 12 per implementation, 8 controls,
at least 10 public reports, at least 14 families.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tck.reference.codes import CODES

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "blind"))
import run  # noqa: E402  (tests/blind/run.py, the runner of every set)
import setkit  # noqa: E402  (the checks the sets share)

FOLDER = "tests/blind36"
BUGS = run.load_bugs(HERE)
CONTROLS = run.load_controls(HERE)
IMPLEMENTATIONS = run.load_implementations(HERE)
ROWS = [*BUGS, *CONTROLS]
GENERIC = ("adapter.", "cache.mismatch", "convention.")
GENERIC_SUFFIXES = (".oracle_mismatch", ".assertion", ".fixture_mismatch")
NOT_FAILURES = ("numerics.half_precision_input_dtype", "numerics.float32_islands_declared")
PHASE_1 = all(not b["expected_codes"] and not b["class_without_code"] for b in BUGS)
BUG_FIELDS = {
    "id", "impl", "file", "line", "original", "replacement", "components", "family", "class",
    "description", "public_report", "expected_codes", "class_without_code",
}  # fmt: skip
CONTROL_FIELDS = {
    "id", "impl", "file", "line", "original", "replacement", "components", "why_correct",
}  # fmt: skip


def test_the_tables_are_big_enough_and_ids_are_unique() -> None:
    ids = [r["id"] for r in ROWS]
    assert 40 <= len(BUGS) <= 50
    assert all(sum(b["impl"] == impl for b in BUGS) >= 12 for impl in IMPLEMENTATIONS)
    assert len(CONTROLS) == 8
    assert len(set(ids)) == len(ids)
    assert all(c["id"].startswith("control.") for c in CONTROLS)
    assert not any(b["id"].startswith("control.") for b in BUGS)
    assert len({b["family"] for b in BUGS}) >= 14
    assert sum(bool(b["public_report"]) for b in BUGS) >= 10
    assert {b["impl"] for b in BUGS} == set(IMPLEMENTATIONS)
    assert {c["impl"] for c in CONTROLS} == set(IMPLEMENTATIONS)


def test_every_row_has_exactly_its_fields() -> None:
    assert all(set(b) == BUG_FIELDS for b in BUGS)
    assert all(set(c) == CONTROL_FIELDS for c in CONTROLS)
    assert all(b["description"] and b["class"] for b in BUGS)
    assert all(c["why_correct"] for c in CONTROLS)


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_each_row_is_one_line_of_its_implementation(row: dict) -> None:
    assert setkit.row_problems(row, HERE, FOLDER) == []


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_rows_name_components_the_adapter_offers(impl: str) -> None:
    offered = setkit.offered_components(HERE, impl)
    assert sorted(IMPLEMENTATIONS[impl]) == offered
    for row in ROWS:
        if row["impl"] == impl:
            assert row["components"] and set(row["components"]) <= set(offered), row["id"]


@pytest.mark.parametrize("bug", BUGS, ids=[b["id"] for b in BUGS])
def test_codes_follow_the_phase(bug: dict) -> None:
    if PHASE_1:
        assert bug["expected_codes"] == [] and bug["class_without_code"] == ""
        return
    assert setkit.bug_problems(bug, CODES) == []
    for code in bug["expected_codes"]:
        assert not code.startswith(GENERIC) and not code.endswith(GENERIC_SUFFIXES), code
        assert code not in NOT_FAILURES, code


def test_the_json_tables_are_make_bugs_output(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("blind36_make_bugs", HERE / "make_bugs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.HERE = tmp_path
    for impl in IMPLEMENTATIONS:
        (tmp_path / f"{impl}.py").write_text((HERE / f"{impl}.py").read_text("utf-8"), "utf-8")
    module.main()
    for name in ("bugs.json", "controls.json"):
        made = json.loads((tmp_path / name).read_text(encoding="utf-8"))
        assert made == json.loads((HERE / name).read_text(encoding="utf-8")), name
