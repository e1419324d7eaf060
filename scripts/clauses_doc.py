"""Write docs/CLAUSES.md: for each SPEC.md clause, its oracle functions, the checks that cite
it, the golden fixtures that cover it, the mutants that target it and its diagnosis codes.

    python scripts/clauses_doc.py           # rewrite docs/CLAUSES.md
    python scripts/clauses_doc.py --check   # exit 1 if docs/CLAUSES.md is stale

A script of the checkout, not a ``tck`` subcommand: it reads SPEC.md and writes docs/, which
exist only in a checkout (neither ships in the package), and it imports every check module
and mutant, which ``tck`` itself never needs at start-up. ``tests/spec/test_spec_traceability.py``
renders it in memory and fails when the committed file differs, and uses the same parsers
for its own checks (every Oracle line resolves, every fixture's and mutant's clause exists).

Where each column comes from:

- **Oracle**: the names on the clause's ``**Oracle:**`` line that resolve to a function or
  class (a bare name in ``tck.reference.oracle``, ``tck.reference`` or
  ``tck.reference.model``; a dotted ``tck.``, ``torch.`` or ``Harness.`` path).
- **Checks**: the check ids (the ``id`` of each check's ``@spec`` marker, as results.json
  names them) whose marker cites the clause; a probe (``id="fingerprint.{field}"``) is
  listed once per field, with its field's clauses (``tck.reference.catalogue``).
- **Fixtures**: the entries of ``fixtures/data/manifest.json`` whose ``clauses`` hold it.
- **Mutants** and **codes**: the code registry (``tck.reference.codes``, SPEC.md Appendix C)
  maps each diagnosis code to its clauses; a mutant targets the clauses of the codes it must
  be reported with (``EXPECTED_CODES`` and ``TOP_CAUSES``).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "SPEC.md"
OUT = ROOT / "docs" / "CLAUSES.md"
COMMAND = "python scripts/clauses_doc.py"

CLAUSE_HEADING = re.compile(r"^### §(\d+\.\d+) (.+)$", re.MULTILINE)
ORACLE_LINE = re.compile(r"^\*\*Oracle:\*\*(.*?)(?=\n\n|\n#|\Z)", re.MULTILINE | re.DOTALL)
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(\(.*\))?$")


def _key(clause: str) -> tuple[int, ...]:
    return tuple(int(part) for part in clause.split("."))


def spec_text() -> str:
    return SPEC.read_text(encoding="utf-8")


def spec_clauses(text: str | None = None) -> dict[str, str]:
    """{clause number: title}, in SPEC.md's order."""
    return dict(CLAUSE_HEADING.findall(spec_text() if text is None else text))


def clause_bodies(text: str | None = None) -> dict[str, str]:
    """{clause: its text, heading to the next heading}."""
    text = spec_text() if text is None else text
    heads = list(CLAUSE_HEADING.finditer(text))
    bodies = {}
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        following = text.find("\n## ", head.end())
        if following != -1 and following < end:
            end = following
        bodies[head.group(1)] = text[head.start() : end]
    return bodies


def oracle_names(text: str | None = None) -> dict[str, list[str]]:
    """{clause: the backticked names on its Oracle line}, arguments and values included."""
    names = {}
    for clause, body in clause_bodies(text).items():
        found = ORACLE_LINE.search(body)
        names[clause] = re.findall(r"`([^`]+)`", found.group(1)) if found else []
    return names


def qualified(name: str) -> str | None:
    """The full dotted name of a name on an Oracle line (``embedding`` is
    ``tck.reference.oracle.embedding``), or None if it names no object."""
    name = name.split("(", 1)[0]
    if "." in name:
        return name if resolve(name) is not None else None
    for module in ("tck.reference.oracle", "tck.reference", "tck.reference.model"):
        found = getattr(importlib.import_module(module), name, None)
        if found is not None and not inspect.ismodule(found):
            return f"{module}.{name}"
    return None


def resolve(name: str) -> Any | None:
    """The object a name on an Oracle line denotes, or None if it names none."""
    name = name.split("(", 1)[0]
    if name.startswith("Harness."):
        from tck.conformance.toolkit.harness import Harness

        attr = name.partition(".")[2]
        if hasattr(Harness, attr):
            return getattr(Harness, attr)
        # an instance attribute (Harness.calls): assigned in __init__
        assigned = re.search(rf"self\.{attr}\s*(:[^=\n]*)?=", inspect.getsource(Harness.__init__))
        return attr if assigned else None
    if "." not in name:
        for module in ("tck.reference.oracle", "tck.reference", "tck.reference.model"):
            found = getattr(importlib.import_module(module), name, None)
            if found is not None and not inspect.ismodule(found):
                return found
        return None
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
            if obj is None:
                return None
        return obj
    return None


def oracle_functions(text: str | None = None) -> dict[str, list[str]]:
    """{clause: the names on its Oracle line that resolve to a function or class (a module,
    such as ``tck.reference.model``, counts too: it is the oracle of §10.8 and §10.10)}."""
    out = {}
    for clause, names in oracle_names(text).items():
        full = [qualified(n) for n in names if IDENTIFIER.match(n)]
        out[clause] = list(dict.fromkeys(n for n in full if n is not None))
    return out


def code_clauses() -> dict[str, list[str]]:
    """{diagnosis code: its clauses}, from the registry (``tck.reference.codes``)."""
    from tck.reference.codes import CODES

    return {name: list(entry.clauses) for name, entry in CODES.items() if entry.clauses}


def check_ids() -> dict[str, list[str]]:
    """{check id: the clauses its @spec marker cites}; a probe once per field."""
    import tck.conformance.checks
    from tck.reference.catalogue import FIELD_CLAUSES

    checks: dict[str, list[str]] = {}
    for info in sorted(pkgutil.iter_modules(tck.conformance.checks.__path__), key=lambda i: i.name):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"tck.conformance.checks.{info.name}")
        for name, function in vars(module).items():
            if not name.startswith("test_") or not callable(function):
                continue
            marks = {m.name: m for m in getattr(function, "pytestmark", [])}
            if "spec" not in marks:
                continue
            check, clauses = marks["spec"].kwargs["id"], list(marks["spec"].args)
            if "{field}" in check:
                shared = [c for c in clauses if not any(c in cs for cs in FIELD_CLAUSES.values())]
                for field in marks["fields"].args:
                    checks[check.format(field=field)] = [*shared, *FIELD_CLAUSES[field]]
            else:
                checks[check] = clauses
    return checks


def fixture_clauses() -> dict[str, list[str]]:
    """{fixture name: its clauses}, from the shipped manifest."""
    manifest = json.loads((ROOT / "fixtures" / "data" / "manifest.json").read_text())
    return {entry["name"]: list(entry["clauses"]) for entry in manifest["fixtures"]}


def mutant_codes() -> dict[str, list[str]]:
    """{mutant: the codes it must be reported with (EXPECTED_CODES and TOP_CAUSES)}."""
    from tck.adapters import mutants

    out = {}
    for name in mutants.NAMES:
        module = mutants.module(name)
        out[name] = sorted({*module.EXPECTED_CODES, *getattr(module, "TOP_CAUSES", ())})
    return out


def _cell(items: list[str]) -> str:
    return ", ".join(f"`{item}`" for item in items) if items else "-"


def render() -> str:
    """docs/CLAUSES.md's text."""
    text = spec_text()
    clauses = spec_clauses(text)
    oracles = oracle_functions(text)
    codes = code_clauses()
    checks = check_ids()
    fixtures = fixture_clauses()
    mutants = mutant_codes()

    def citing(table: dict[str, list[str]], clause: str) -> list[str]:
        return sorted(name for name, cited in table.items() if clause in cited)

    mutant_clauses = {
        m: sorted({c for code in cs for c in codes.get(code, [])}) for m, cs in mutants.items()
    }
    lines = [
        "# Clauses: where each is computed, checked, fixed and diagnosed",
        "",
        f"Generated by `{COMMAND}` from SPEC.md's Oracle lines, the code registry",
        "(tck.reference.codes), the checks' `@spec` markers, fixtures/data/manifest.json and",
        "the mutants' expected codes; do not edit by hand (`tests/spec/test_spec_traceability.py`",
        "fails when it is stale).",
        "",
        "Per clause: **oracle** (the functions that compute it), **checks** (check ids as",
        "results.json names them), **fixtures** (golden fixtures that cover it), **mutants**",
        "(`tck run --adapter mutants.NAME`: the bugs that must be caught there) and **codes**",
        "(the diagnosis codes that name its violation: tck.reference.codes, SPEC.md Appendix C).",
        "",
    ]
    for clause, title in clauses.items():
        lines += [
            f"## §{clause} {title}",
            "",
            f"- oracle: {_cell(oracles.get(clause, []))}",
            f"- checks: {_cell(citing(checks, clause))}",
            f"- fixtures: {_cell(citing(fixtures, clause))}",
            f"- mutants: {_cell(citing(mutant_clauses, clause))}",
            f"- codes: {_cell(citing(codes, clause))}",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
