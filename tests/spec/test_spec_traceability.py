"""SPEC.md <-> tests and checks, both ways: every clause is verified, every citation exists."""

import importlib
import importlib.util
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import tck.conformance.checks

ROOT = Path(__file__).resolve().parents[2]
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
    # the self-tests, one folder per area (tests/oracle, tests/checks, ...); not the blind
    # benchmarks' own table checks
    paths = (ROOT / "tests").glob("*/test_*.py")
    for path in sorted(p for p in paths if not p.parent.name.startswith("blind")):
        for call in SPEC_CALL.findall(path.read_text(encoding="utf-8")):
            for clause in QUOTED_CLAUSE.findall(call):
                cited.setdefault(clause, set()).add(path.name)
    return cited


def check_citations() -> dict[str, set[str]]:
    """Clauses named by the spec markers of every check in tck.conformance."""
    cited: dict[str, set[str]] = {}
    for info in pkgutil.iter_modules(tck.conformance.checks.__path__):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"tck.conformance.checks.{info.name}")
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


# ---------------------------------------------------------------- oracle, fixtures, mutants


def _clauses_doc():
    """scripts/clauses_doc.py, the generator of docs/CLAUSES.md and its SPEC.md parsers."""
    path = ROOT / "scripts" / "clauses_doc.py"
    spec = importlib.util.spec_from_file_location("clauses_doc", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


clauses_doc = _clauses_doc()

# Words on Oracle lines that name no function and no argument of one, and why.
ORACLE_WORDS = {
    "undefined": "a value of scaled_dot_product_attention's fully_masked_rows",
    "careful": "the tolerance rule's careful run (§10.7), named beside Harness.careful",
}
# Clauses whose oracle is no function of ours, and what it is instead.
NO_ORACLE_FUNCTION = {
    "10.1": "every oracle function (the oracle has no dropout)",
    "10.2": "every oracle function",
    "10.6": "the functions of the clauses cited",
    "10.9": "the float64 oracle and the original torch module",
    "11.8": "the implementation on each row alone",
}


def test_every_clause_has_an_oracle_line():
    names = clauses_doc.oracle_names()
    bodies = clauses_doc.clause_bodies()
    missing = [c for c in spec_clauses() if "**Oracle:**" not in bodies[c]]
    assert not missing, f"clauses without an **Oracle:** line: {missing}"
    assert set(names) == set(spec_clauses())


def test_every_name_on_an_oracle_line_exists():
    """Each backticked name on an Oracle line is a function, class or module of ours (or of
    torch) that exists, or an argument of a function named on the same line."""
    wrong = []
    for clause, names in clauses_doc.oracle_names().items():
        found = [clauses_doc.resolve(n) for n in names if clauses_doc.IDENTIFIER.match(n)]
        arguments = set()
        for obj in found:
            if callable(obj):
                try:
                    arguments |= set(inspect.signature(obj).parameters)
                except (TypeError, ValueError):
                    pass
        for name in names:
            if not clauses_doc.IDENTIFIER.match(name):
                continue  # a shape or an expression, such as [B, 1, 1, Lk]
            if clauses_doc.resolve(name) is None and name not in arguments | set(ORACLE_WORDS):
                wrong.append(f"§{clause}: {name}")
    assert not wrong, f"Oracle lines name what does not exist: {wrong}"


def test_every_clause_names_an_oracle_function_or_says_why_not():
    functions = clauses_doc.oracle_functions()
    without = {c for c, names in functions.items() if not names and c in spec_clauses()}
    assert without == set(NO_ORACLE_FUNCTION), (
        f"clauses whose Oracle line names no function of ours: {sorted(without)}; "
        f"listed in NO_ORACLE_FUNCTION: {sorted(NO_ORACLE_FUNCTION)}"
    )


def test_every_fixture_cites_existing_clauses():
    clauses = spec_clauses()
    fixtures = clauses_doc.fixture_clauses()
    assert fixtures, "the manifest lists no fixture"
    empty = [name for name, cited in fixtures.items() if not cited]
    assert not empty, f"fixtures that cite no clause: {empty}"
    unknown = {n: [c for c in cs if c not in clauses] for n, cs in fixtures.items()}
    unknown = {n: cs for n, cs in unknown.items() if cs}
    assert not unknown, f"fixtures cite clauses SPEC.md does not have: {unknown}"


def test_every_mutant_code_is_registered():
    codes = clauses_doc.code_clauses()
    missing = {
        mutant: [code for code in expected if code not in codes]
        for mutant, expected in clauses_doc.mutant_codes().items()
    }
    missing = {m: cs for m, cs in missing.items() if cs}
    assert not missing, f"mutants expect codes without clauses in tck.reference.codes: {missing}"


def test_clauses_doc_is_current():
    text = clauses_doc.render()
    committed = clauses_doc.OUT.read_text(encoding="utf-8") if clauses_doc.OUT.exists() else ""
    assert committed == text, f"docs/CLAUSES.md is stale: run {clauses_doc.COMMAND}"


# Tags whose members are alternatives for one role (a norm, a positional encoding): a check
# over several of them tests each one's own clause.
ALTERNATIVES = ("norm", "positional")


def test_a_check_citing_one_alternatives_clause_cites_each():
    """A check that runs on several alternatives of one role and cites the clause of one (a
    norm check citing §5.1 for LayerNorm) cites the clause of every one it runs on: the
    markers are written by hand, and an alternative added later (§5.4 ScaleNorm to the norms)
    would otherwise be checked without its clause in the report."""
    from tck.reference import record
    from tck.reference.components import tagged

    uncited = []
    for info in pkgutil.iter_modules(tck.conformance.checks.__path__):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"tck.conformance.checks.{info.name}")
        for name, function in vars(module).items():
            if not name.startswith("test_") or not callable(function):
                continue
            marks = getattr(function, "pytestmark", [])
            cited = {c for m in marks if m.name == "spec" for c in m.args}
            runs_on = {c for m in marks if m.name == "components" for c in m.args}
            for tag in ALTERNATIVES:
                members = runs_on & set(tagged(tag))
                own = {c: set(record(c).clauses) for c in members}
                if any(clauses & cited for clauses in own.values()):
                    uncited += [f"{name} on {c}" for c in sorted(own) if not own[c] & cited]
    assert not uncited, f"checks that leave out an alternative's clause: {uncited}"
