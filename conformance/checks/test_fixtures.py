"""Golden fixtures: each fixture of tck.fixtures through every subject that can take it.

One check per fixture (``fixtures.<name>``), citing the fixture's clauses and applying to
its component. A subject takes a fixture when it is built with the fixture's config, loads
the fixture's canonical parameters, and declares the conventions the expected output
depends on (the manifest lists them); otherwise the check skips and says why. Each file's
sha256 is checked against the manifest before use: a changed file is an error, never used.
"""

from __future__ import annotations

from typing import Any

import pytest

from tck import fixtures
from tck.adapters import Unsupported
from tck.conformance.diagnosis.explain import explain
from tck.conformance.toolkit.harness import Harness, Instance
from tck.conformance.toolkit.results import CheckFailure
from tck.reference import COMPONENTS, Config
from tck.reference.tolerance import compare

spec = pytest.mark.spec


def run_fixture(tck: Harness, name: str) -> None:
    fixture = fixtures.load(name)  # FixtureError (an error result) when the file changed
    entry = fixture.entry
    declared = tck.subject.conventions
    differ = {
        field: (value, getattr(declared, field))
        for field, value in entry["conventions"].items()
        if getattr(declared, field) != value
    }
    if differ:
        pytest.skip(
            f"fixture {name} assumes "
            + ", ".join(f"{f}={v!r}" for f, (v, _) in differ.items())
            + "; the subject declares "
            + ", ".join(f"{f}={d!r}" for f, (_, d) in differ.items())
        )
    config = Config(**entry["config"])
    fixed = getattr(tck.subject, "config", None) or {}  # SPEC.md §0.5: e.g. no attention bias
    clash = {f: v for f, v in fixed.items() if getattr(config, f) != v}
    if clash:
        pytest.skip(
            f"fixture {name} has {', '.join(f'{f}={getattr(config, f)!r}' for f in clash)}; "
            f"the subject fixes {', '.join(f'{f}={v!r}' for f, v in clash.items())}"
        )
    handle = tck.build(config)  # on tck run's --device; Unsupported: a skip
    if fixture.params:
        try:
            tck.adapter.load(handle, fixture.params)
        except Unsupported as why:
            pytest.skip(f"fixture {name} needs canonical parameters loaded: {why}")
    inst = Instance(tck.subject, config, handle, fixture.params)
    test = tck.run(inst, fixture.inputs)
    gold = fixture.expected
    if test.shape != gold.shape:
        raise CheckFailure(
            "shape.wrong_output_shape",
            f"fixture {name}: output shape {test.shape}, the fixture's is {gold.shape} "
            "(SPEC.md §10.6)",
            {"shape": list(test.shape), "expected_shape": list(gold.shape)},
        )
    tolerance = entry["tolerance"]
    result = compare(test, gold, dtype=tolerance["dtype"], ignore=tck.ignore_mask(inst, gold))
    tck.note({**result.metrics(), "fixture": name, "file": entry["file"]})
    if not result.passed:
        code, message = explain(tck, inst, fixture.inputs, test, result)
        # explain() compares with the oracle; here the numbers are against the fixture
        message = message.replace("|test - oracle|", "|test - expected|")
        if code.endswith(".oracle_mismatch"):  # no bug class named: say what it disagrees with
            code = code.removesuffix(".oracle_mismatch") + ".fixture_mismatch"
            message = message.replace("disagrees with the oracle", "disagrees with the fixture")
        raise CheckFailure(code, f"fixture {name} ({entry['kind']}): {message}", result.metrics())


def _check(entry: dict[str, Any]):
    name = entry["name"]

    @spec(*entry["clauses"], id=f"fixtures.{name}")
    @pytest.mark.components(entry["component"])
    def check(tck: Harness) -> None:
        run_fixture(tck, name)

    check.__name__ = check.__qualname__ = f"test_{name}"
    check.__doc__ = entry.get("description", "")
    return check


def _manifest_broken(error: fixtures.FixtureError):
    @spec("0.2", id="fixtures.fixture_manifest")
    @pytest.mark.components(*COMPONENTS)
    def test_fixture_manifest(tck: Harness) -> None:
        raise error

    return test_fixture_manifest


# One check per fixture, generated from the manifest so that each result carries the
# fixture's own name, clauses and component. A broken manifest becomes one check that
# errors with the reason, rather than a collection error that hides every other check.
try:
    _ENTRIES = fixtures.entries()
except fixtures.FixtureError as _error:
    test_fixture_manifest = _manifest_broken(_error)
else:
    for _entry in _ENTRIES:
        globals()[f"test_{_entry['name']}"] = _check(_entry)
