"""The root-cause order a user can act on (reports/causes.py, SPEC.md §0.3): a cause that
reproduces the failing output exactly beats one that fits more rows; a fit in a 16-bit
comparison never outranks float64 evidence nor absorbs it; under --baseline the new causes
come first."""

from __future__ import annotations

from typing import Any

import pytest

from tck.reports.causes import root_causes, top_cause


def _r(subject: str, code: str, dtype: str = "float64", **metrics: Any) -> dict[str, Any]:
    return {
        "check": "equality.oracle",
        "subject": subject,
        "status": "fail",
        "diagnosis": {"code": code, "message": code},
        "metrics": {"dtype": dtype, **metrics},
    }


@pytest.mark.spec("0.3")
def test_an_exact_reproduction_beats_a_fit_on_more_rows() -> None:
    loose = [
        _r(
            "mha",
            "attention.softmax_axis_wrong",
            reproduced_by="attention.softmax_axis_wrong",
            reproduced_at="float32",
        )
        for _ in range(4)
    ]
    exact = _r(
        "layer_norm",
        "layer_norm.unbiased_variance",
        reproduced_by="layer_norm.unbiased_variance",
        reproduced_at="float64",
    )
    exact["metrics"]["dtype"] = None  # an oracle row of the default dtype carries none
    causes = root_causes([*loose, exact])
    assert [c["code"] for c in causes] == [
        "layer_norm.unbiased_variance",
        "attention.softmax_axis_wrong",
    ]
    assert causes[0]["evidence"] > causes[1]["evidence"]
    # without the exact one, rows decide as before
    assert top_cause(loose) == "attention.softmax_axis_wrong"


@pytest.mark.spec("0.3")
def test_a_sixteen_bit_fit_never_outranks_float64_failures() -> None:
    generic = [_r("decoder_block", "blocks.oracle_mismatch") for _ in range(11)]
    fit = _r("decoder_block", "rope.layout_half_split", "bfloat16", fit_only_in="bfloat16")
    causes = root_causes([fit, *generic])
    assert [c["code"] for c in causes] == ["blocks.oracle_mismatch", "rope.layout_half_split"]
    assert len(causes[0]["symptoms"]) == 11 and causes[1]["weak"]
    # a 16-bit fit alone is still reported as the cause of its own failure
    assert top_cause([fit]) == "rope.layout_half_split"
    # a property's finding in bfloat16 is not a fit: it keeps its rank
    finding = _r("decoder_block", "rope.layout_half_split", "bfloat16")
    assert top_cause([finding, *generic]) == "rope.layout_half_split"


@pytest.mark.spec("0.3")
def test_under_a_baseline_new_causes_come_first() -> None:
    old = _r("layer_norm", "layer_norm.unbiased_variance", reproduced_by="x")
    old["baseline"] = "known"
    new = _r("mha", "attention.oracle_mismatch")
    new["baseline"] = "new"
    causes = root_causes([old, new])
    assert [c["code"] for c in causes] == [
        "attention.oracle_mismatch",
        "layer_norm.unbiased_variance",
    ]
    assert causes[1]["known"] and not causes[0]["known"]
    # a cause with one new failure among known ones is new
    again = {**new, "subject": "layer_norm", "diagnosis": old["diagnosis"]}
    assert top_cause([old, again, new]) == "layer_norm.unbiased_variance"
