"""The third blind benchmark's tables are well formed (no tck run here: run.py does that).

Each bug and each control is one line of its implementation replaced, the line occurs exactly
once, the patched file still compiles, a bug's expected codes exist in the registry of
diagnosis codes (or a class without a code is described), and every row names components its
implementation's adapter offers, as implementations.json lists them.
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
import run  # noqa: E402  (tests/blind/run.py, the runner of both sets)

BUGS = run.load_bugs(HERE)
CONTROLS = run.load_controls(HERE)
IMPLEMENTATIONS = run.load_implementations(HERE)
ROWS = [*BUGS, *CONTROLS]


def test_the_tables_are_big_enough_and_ids_are_unique() -> None:
    ids = [r["id"] for r in ROWS]
    assert len(BUGS) >= 45
    assert len(CONTROLS) >= 6
    assert len(set(ids)) == len(ids)
    assert all(c["id"].startswith("control.") for c in CONTROLS)
    assert not any(b["id"].startswith("control.") for b in BUGS)


def test_the_set_is_not_set_one() -> None:
    # implementations of its own, none of set 1's
    assert len(IMPLEMENTATIONS) >= 3
    assert not set(IMPLEMENTATIONS) & set(run.IMPLEMENTATIONS)


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_each_row_is_one_line_that_compiles(row: dict) -> None:
    assert "\n" not in row["original"] and "\n" not in row["replacement"]
    assert row["original"] != row["replacement"]
    assert row["file"] == f"tests/blind3/{row['impl']}.py"
    source = run.patched_source(row, HERE)  # raises unless the original occurs exactly once
    compile(source, row["file"], "exec")
    lines = (HERE / f"{row['impl']}.py").read_text(encoding="utf-8").split("\n")
    assert lines[row["line"] - 1] == row["original"]


@pytest.mark.parametrize("bug", BUGS, ids=[b["id"] for b in BUGS])
def test_expected_codes_exist_or_the_class_is_described(bug: dict) -> None:
    unknown = [c for c in bug["expected_codes"] if c not in CODES]
    assert not unknown
    # exactly one of: codes that name the class, or a description of the class no code names
    assert bool(bug["expected_codes"]) != bool(bug["class_without_code"])
    assert bug["class"] and bug["family"]


@pytest.mark.parametrize("control", CONTROLS, ids=[c["id"] for c in CONTROLS])
def test_each_control_says_why_it_stays_correct(control: dict) -> None:
    assert control["why_correct"]
    assert "expected_codes" not in control


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_components_are_offered_by_the_implementation(row: dict) -> None:
    assert row["components"]
    assert set(row["components"]) <= set(IMPLEMENTATIONS[row["impl"]])


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_each_adapter_offers_the_components_the_table_names(impl: str) -> None:
    spec = importlib.util.spec_from_file_location(f"blind3_{impl}", HERE / f"{impl}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    offered = sorted(s.component for s in module.adapter.subjects())
    assert offered == sorted(IMPLEMENTATIONS[impl])


def test_the_tables_are_what_make_bugs_writes() -> None:
    """bugs.json and controls.json are make_bugs.py's output (nobody edited one by hand)."""
    spec = importlib.util.spec_from_file_location("blind3_make_bugs", HERE / "make_bugs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    bugs, controls = module.build()
    assert bugs == BUGS
    assert controls == CONTROLS
    json.dumps(BUGS)  # serialisable as written


def test_the_set_is_not_set_two() -> None:
    set_two = run.load_implementations(HERE.parent / "blind2")
    assert not set(IMPLEMENTATIONS) & set(set_two)
