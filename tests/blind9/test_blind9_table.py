"""The ninth blind benchmark's tables are well formed (no tck run here: run.py does that).

Each bug and each control is one line of its implementation replaced, the line occurs exactly
once at the row's line number, the patched file still compiles, every row names components
its implementation's adapter offers, and the JSON tables are make_bugs.py's output. This set
was frozen in two phases (PROTOCOL.md): in phase 1 every bug has neither expected codes nor a
class without a code; from phase 2 on each bug has exactly one of them, its codes exist in the
registry of diagnosis codes and none is generic. The shared checks are tests/blind/setkit.py's.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tck.reference.codes import CODES

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "blind"))
import run  # noqa: E402  (tests/blind/run.py, the runner of every set)
import setkit  # noqa: E402  (the checks the sets share)

BUGS = run.load_bugs(HERE)
CONTROLS = run.load_controls(HERE)
IMPLEMENTATIONS = run.load_implementations(HERE)
ROWS = [*BUGS, *CONTROLS]
GENERIC = ("adapter.", "cache.mismatch")
GENERIC_SUFFIXES = (".oracle_mismatch", ".assertion", ".fixture_mismatch")
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
    assert 40 <= len(BUGS) <= 60
    assert 7 <= len(CONTROLS) <= 10
    assert len(set(ids)) == len(ids)
    assert all(c["id"].startswith("control.") for c in CONTROLS)
    assert not any(b["id"].startswith("control.") for b in BUGS)
    assert len({b["family"] for b in BUGS}) >= 14
    assert sum(bool(b["public_report"]) for b in BUGS) >= 8


def test_every_row_has_exactly_its_fields() -> None:
    assert all(set(b) == BUG_FIELDS for b in BUGS)
    assert all(set(c) == CONTROL_FIELDS for c in CONTROLS)
    assert all(b["description"] and b["class"] for b in BUGS)
    assert all(c["why_correct"] for c in CONTROLS)
    assert all(r.startswith("https://github.com/") for r in (b["public_report"] for b in BUGS) if r)


def test_the_implementations_are_none_of_the_earlier_sets() -> None:
    assert len(IMPLEMENTATIONS) == 3
    earlier = set(run.IMPLEMENTATIONS)
    for folder in ("blind2", "blind3", "blind4", "blind5", "blind6", "blind7", "blind8"):
        earlier |= set(run.load_implementations(HERE.parent / folder))
    assert not set(IMPLEMENTATIONS) & earlier


def test_the_json_tables_are_the_output_of_make_bugs() -> None:
    spec = importlib.util.spec_from_file_location("blind9_make_bugs", HERE / "make_bugs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    bugs, controls = module.tables()
    assert bugs == BUGS
    assert controls == CONTROLS


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_each_implementation_opens_with_the_format_guards(impl: str) -> None:
    head = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")[:2]
    assert head == ["# fmt: off", "# ruff: noqa"]


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_implementations_json_lists_each_adapters_subjects(impl: str) -> None:
    assert sorted(IMPLEMENTATIONS[impl]) == setkit.offered_components(HERE, impl)


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_each_row_is_one_line_replaced(row: dict) -> None:
    assert setkit.row_problems(row, HERE, "tests/blind9") == []
    assert row["impl"] in IMPLEMENTATIONS
    assert row["components"]
    assert set(row["components"]) <= set(IMPLEMENTATIONS[row["impl"]])


@pytest.mark.parametrize("bug", BUGS, ids=[b["id"] for b in BUGS])
def test_each_bug_has_codes_only_from_phase_2(bug: dict) -> None:
    if PHASE_1:
        assert bug["expected_codes"] == [] and bug["class_without_code"] == ""
        return
    assert setkit.bug_problems(bug, CODES) == []
    for code in bug["expected_codes"]:
        assert not code.startswith(GENERIC), code
        assert not code.endswith(GENERIC_SUFFIXES), code
