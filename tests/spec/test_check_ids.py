"""Check ids are explicit: every check of tck.conformance declares its public id in its
``@spec`` marker, ids are unique, and the plugin reports the declared id (so moving a check
to another file, or renaming its function, never renames it in results.json)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import tck.conformance.checks
from tck.conformance.runner.plugin import declared_id


def checks() -> dict[str, object]:
    """Every check function of tck.conformance: 'module.function' -> function."""
    out = {}
    for info in pkgutil.iter_modules(tck.conformance.checks.__path__):
        if info.name.startswith("test_"):
            module = importlib.import_module(f"tck.conformance.checks.{info.name}")
            for name, function in vars(module).items():
                if name.startswith("test_") and callable(function):
                    out[f"{info.name}.{name}"] = function
    return out


def _spec(function: object) -> pytest.Mark | None:
    marks = [m for m in getattr(function, "pytestmark", []) if m.name == "spec"]
    return marks[0] if marks else None


def declared_ids() -> set[str]:
    """The ids the checks declare (a probe's template as written: fingerprint.{field})."""
    return {
        _spec(f).kwargs["id"] for f in checks().values() if _spec(f) and "id" in _spec(f).kwargs
    }


def test_every_check_declares_its_id():
    missing = [
        where for where, f in checks().items() if "id" not in getattr(_spec(f), "kwargs", {})
    ]
    assert not missing, f'checks without @spec(..., id="<area>.<name>"): {missing}'
    assert len(checks()) > 60


def test_check_ids_are_unique_and_dotted():
    seen: dict[str, str] = {}
    for where, function in checks().items():
        check = _spec(function).kwargs["id"]
        assert check.count(".") == 1 and check == check.strip(), (where, check)
        assert check not in seen, f"{where} and {seen[check]} both declare {check!r}"
        seen[check] = where


def test_a_probe_id_is_filled_from_its_field():
    probe = _spec(checks()["test_fingerprint.test_convention"])
    assert declared_id(probe, "test_convention", {"field": "eps"}) == "fingerprint.eps"
    with pytest.raises(pytest.UsageError, match="declares no id"):
        declared_id(None, "test_new_check", {})


def test_ids_do_not_follow_the_file_or_function_name():
    """The id is the marker's: a check whose function is named otherwise keeps its id."""
    mark = pytest.mark.spec("3.1", id="attention.softmax_rows_sum_to_one").mark
    assert declared_id(mark, "test_moved_and_renamed", {}) == "attention.softmax_rows_sum_to_one"
