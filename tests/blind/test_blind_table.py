"""The blind benchmark's bug table is well formed (no tck run here: run.py does that).

Each bug is one line of its implementation replaced, the line occurs exactly once, the patched
file still compiles, its expected codes exist in the registry of diagnosis codes, and it names
components its implementation's adapter offers.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tck.reference.codes import CODES

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run  # noqa: E402  (tests/blind/run.py, loaded from its folder)

BUGS = run.load_bugs()


def test_the_table_is_big_enough_and_ids_are_unique() -> None:
    ids = [b["id"] for b in BUGS]
    assert len(ids) >= 40
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("bug", BUGS, ids=[b["id"] for b in BUGS])
def test_each_bug_is_one_line_that_compiles(bug: dict) -> None:
    assert "\n" not in bug["original"] and "\n" not in bug["replacement"]
    assert bug["original"] != bug["replacement"]
    assert bug["file"] == f"tests/blind/{bug['impl']}.py"
    source = run.patched_source(bug)  # raises unless the original occurs exactly once
    compile(source, bug["file"], "exec")
    lines = (HERE / f"{bug['impl']}.py").read_text(encoding="utf-8").split("\n")
    assert lines[bug["line"] - 1] == bug["original"]


@pytest.mark.parametrize("bug", BUGS, ids=[b["id"] for b in BUGS])
def test_expected_codes_exist_or_the_class_is_described(bug: dict) -> None:
    unknown = [c for c in bug["expected_codes"] if c not in CODES]
    assert not unknown
    # exactly one of: codes that name the class, or a description of the class no code names
    assert bool(bug["expected_codes"]) != bool(bug["class_without_code"])
    assert bug["class"]


@pytest.mark.parametrize("bug", BUGS, ids=[b["id"] for b in BUGS])
def test_components_are_offered_by_the_implementation(bug: dict) -> None:
    assert bug["components"]
    assert set(bug["components"]) <= set(run.IMPLEMENTATIONS[bug["impl"]])


@pytest.mark.parametrize("impl", sorted(run.IMPLEMENTATIONS))
def test_each_adapter_offers_the_components_the_runner_names(impl: str) -> None:
    spec = importlib.util.spec_from_file_location(f"blind_{impl}", HERE / f"{impl}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    offered = sorted(s.component for s in module.adapter.subjects())
    assert offered == sorted(run.IMPLEMENTATIONS[impl])


def test_the_recorded_head_is_the_one_of_the_tck_measured(tmp_path: Path) -> None:
    """``--tck-python`` may import tck from another checkout: the results record that tree's
    HEAD, not the HEAD of the tree holding run.py."""
    import subprocess

    other = tmp_path / "other"
    (other / "src" / "tck").mkdir(parents=True)
    (other / "src" / "tck" / "__init__.py").write_text("")

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=other,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "another checkout")
    python = tmp_path / "python"  # an interpreter whose tck is the other checkout's
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{other / "src"}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    assert run.tck_git_head(str(python)) == git("rev-parse", "HEAD")
    ours = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True
    ).stdout.strip()
    assert run.tck_git_head(str(python)) != ours
    assert run.tck_git_head(str(tmp_path / "no_such_python")) is None
