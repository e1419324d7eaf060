"""tests/blind/setkit.py: the table checks find what they should, and the output comparison
tells a changed output from an unchanged one (on tiny hand-made rows, no tck run)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import setkit  # noqa: E402


def _set(tmp_path: Path) -> Path:
    (tmp_path / "impl.py").write_text("def f(x):\n    y = x + 1\n    return y\n", encoding="utf-8")
    return tmp_path


def _row(**changes) -> dict:
    row = {
        "id": "b", "impl": "impl", "file": "tests/x/impl.py", "line": 2,
        "original": "    y = x + 1", "replacement": "    y = x + 2",
    }  # fmt: skip
    row.update(changes)
    return row


def test_a_well_formed_row_has_no_problems(tmp_path: Path) -> None:
    assert setkit.row_problems(_row(), _set(tmp_path), "tests/x") == []


def test_row_problems_name_each_fault(tmp_path: Path) -> None:
    folder = _set(tmp_path)
    assert "line 3 is not the original line" in setkit.row_problems(_row(line=3), folder, "tests/x")
    missing = setkit.row_problems(_row(original="    y = x + 9"), folder, "tests/x")
    assert any("occurs 0 times" in p for p in missing)
    broken = setkit.row_problems(_row(replacement="    y = (x"), folder, "tests/x")
    assert any("does not compile" in p for p in broken)
    assert setkit.row_problems(_row(replacement="    y = x + 1"), folder, "tests/x") == [
        "the replacement is the original"
    ]


def test_bug_problems_need_known_codes_or_a_described_class() -> None:
    codes = {"mask.ignored": "the mask has no effect"}
    good = {
        "expected_codes": ["mask.ignored"],
        "class_without_code": "",
        "class": "c",
        "family": "f",
    }
    assert setkit.bug_problems(good, codes) == []
    unknown = {**good, "expected_codes": ["mask.nope"]}
    assert setkit.bug_problems(unknown, codes) == ["unknown code mask.nope"]
    both_empty = {**good, "expected_codes": []}
    assert setkit.bug_problems(both_empty, codes) == [
        "give either expected codes or class_without_code, exactly one"
    ]


def test_largest_difference_separates_float64_from_16_bit_and_flags_nan_patterns() -> None:
    a = [("float64", np.array([1.0, 2.0])), ("float16", np.array([1.0, np.nan]))]
    same = setkit.largest_difference(a, a)
    assert same == {"float64": 0.0, "16-bit": 0.0}
    b = [("float64", np.array([1.0, 2.5])), ("float16", np.array([1.0, 3.0]))]
    diff = setkit.largest_difference(a, b)
    assert diff["float64"] == 0.25  # |2.5 - 2| / max(1, 2)
    assert diff["16-bit"] == float("inf")  # a NaN in one run only


def test_safe_turns_an_exception_into_an_output() -> None:
    def boom() -> None:
        raise RuntimeError("patched copy raised")

    out = setkit.safe(boom)
    assert out.shape == (1,)
    np.testing.assert_array_equal(setkit.safe(lambda: [1, 2]), np.array([1.0, 2.0]))
