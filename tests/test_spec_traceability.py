"""SPEC.md <-> tests and checks, both ways: every clause is verified, every citation exists."""

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import tck.conformance

ROOT = Path(__file__).resolve().parents[1]
CLAUSE_HEADING = re.compile(r"^### §(\d+\.\d+) (.+)$", re.MULTILINE)
SPEC_CALL = re.compile(r"spec\(([^)]*)\)")
QUOTED_CLAUSE = re.compile(r"[\"'](\d+\.\d+)[\"']")

# Clauses no conformance check can verify on an implementation, and why.
NOT_CHECKABLE = {
    "0.1": "notation only",
    "0.4": "configuration sizes: a vocabulary, not a behaviour",
    "10.4": "FLOPs describe cost, not behaviour (the benchmarks report them)",
}
# Clauses no self-test needs to cite.
NOT_SELF_TESTED = {"0.1": "notation only"}


def spec_clauses() -> dict[str, str]:
    return dict(CLAUSE_HEADING.findall((ROOT / "SPEC.md").read_text(encoding="utf-8")))


def self_test_citations() -> dict[str, set[str]]:
    cited: dict[str, set[str]] = {}
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for call in SPEC_CALL.findall(path.read_text(encoding="utf-8")):
            for clause in QUOTED_CLAUSE.findall(call):
                cited.setdefault(clause, set()).add(path.name)
    return cited


def check_citations() -> dict[str, set[str]]:
    """Clauses named by the spec markers of every check in tck.conformance."""
    cited: dict[str, set[str]] = {}
    for info in pkgutil.iter_modules(tck.conformance.__path__):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"tck.conformance.{info.name}")
        for name, function in vars(module).items():
            if not name.startswith("test_") or not callable(function):
                continue
            for mark in getattr(function, "pytestmark", []):
                if mark.name == "spec":
                    for clause in mark.args:
                        cited.setdefault(clause, set()).add(f"{info.name}.{name}")
    return cited


def test_spec_has_numbered_clauses():
    clauses = spec_clauses()
    assert len(clauses) >= 40
    assert "4.4" in clauses and clauses["4.4"].startswith("Fully-masked")


@pytest.mark.spec("0.2", "0.3", "0.4")
def test_every_cited_clause_exists():
    clauses = spec_clauses()
    for where, cited in (("self-tests", self_test_citations()), ("checks", check_citations())):
        unknown = {c: sorted(w) for c, w in cited.items() if c not in clauses}
        assert not unknown, f"{where} cite clauses SPEC.md does not have: {unknown}"


def test_every_clause_has_a_self_test():
    cited = self_test_citations()
    missing = [c for c in spec_clauses() if c not in cited and c not in NOT_SELF_TESTED]
    assert not missing, f"clauses no self-test cites: {missing}"


def test_every_clause_has_a_conformance_check():
    cited = check_citations()
    missing = [
        f"§{c} {title}"
        for c, title in spec_clauses().items()
        if c not in cited and c not in NOT_CHECKABLE
    ]
    assert not missing, f"clauses no conformance check verifies: {missing}"
    stale = [c for c in NOT_CHECKABLE if c in cited]
    assert not stale, f"clauses listed as not checkable but checked: {stale}"
