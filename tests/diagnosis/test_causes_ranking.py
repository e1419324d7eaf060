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


def _at(component: str, code: str, check: str = "equality.oracle") -> dict[str, Any]:
    return {**_r(component, code), "component": component, "check": check}


@pytest.mark.spec("0.3")
def test_the_smallest_component_s_cause_comes_before_its_composites() -> None:
    """An RMSNorm over (sequence, features) leaks the future through every decoder built on
    it: the composites' causal-leak findings outnumber the norm's own, which still leads."""
    composites = [
        _at(subject, "mask.causal_leak", "decoder.causal_no_leak")
        for subject in ("decoder_block", "causal_lm")
        for _ in range(3)
    ]
    norm = _at("rms_norm", "layer_norm.positions_interact", "norm.rows_independent")
    assert top_cause([*composites, norm]) == "layer_norm.positions_interact"
    causes = root_causes([*composites, norm])
    assert [c["level"] for c in causes] == [0, 1]  # an op, then a layer (and a model)
    # among causes of one component's level, rows still decide
    assert top_cause([*composites, _at("decoder_block", "blocks.residual_missing")]) == (
        "mask.causal_leak"
    )


@pytest.mark.spec("0.3")
def test_a_cache_finding_on_a_subject_whose_forward_fails_comes_after_the_forward_s() -> None:
    """A soft causal mask leaks in the full forward; the cached steps, checked against that
    forward, disagree with it and a cache hypothesis may fit the difference: the forward's
    cause leads, the cache's follows."""
    cached = [
        _at("causal_self_attention", "cache.position_offset_wrong", "decoder.kv_cache")
        for _ in range(5)
    ]
    leak = _at("causal_self_attention", "mask.causal_leak", "decoder.causal_no_leak")
    assert [c["code"] for c in root_causes([*cached, leak])] == [
        "mask.causal_leak",
        "cache.position_offset_wrong",
    ]
    # a right-padded row, compared with itself alone, sees its pads through the same leak
    padded = [
        _at("causal_self_attention", "batch.padded_rows_differ", "decoder.batch_rows")
        for _ in range(3)
    ]
    assert top_cause([*padded, *cached, leak]) == "mask.causal_leak"
    # a forward that only disagrees (no named cause) leaves the cache's cause first, and
    # a bug on the cached path alone (the forward passes) is the cache's
    generic = _at("causal_self_attention", "attention.oracle_mismatch")
    assert top_cause([*cached, generic]) == "cache.position_offset_wrong"
    assert top_cause(cached) == "cache.position_offset_wrong"


@pytest.mark.spec("0.3")
def test_a_named_cause_found_by_a_cached_check_is_not_a_failing_forward() -> None:
    """A cache that restarts at slot 0 in every call: three regimes reproduce it as the
    cache ignored; a fourth (left padding, where the oracle's hypothesis does not fit) measures
    that each decoded query sees its own key only, a window too narrow. Both findings are on
    the cached path; the plain forward passes, so neither is a consequence of the other and
    the reproduced cause leads."""
    ignored = [
        {
            **_at("causal_self_attention", "cache.ignored", "decoder.kv_cache"),
            "clause": ["11.6"],
            "metrics": {"dtype": "float64", "reproduced_by": "cache.ignored"},
        }
        for _ in range(3)
    ]
    window = {
        **_at("causal_self_attention", "mask.sliding_window_wrong", "decoder.kv_cache_left_padded"),
        "clause": ["11.6", "11.7"],
    }
    assert top_cause([*ignored, window]) == "cache.ignored"
    # the same finding from a check of the plain forward still demotes the cache's cause
    forward = {**window, "check": "decoder.causal_no_leak", "clause": ["4.5", "11.1"]}
    assert top_cause([*ignored, forward]) == "mask.sliding_window_wrong"


@pytest.mark.spec("0.3")
def test_a_cache_cause_seen_only_on_padded_rows_follows_a_failing_padded_forward() -> None:
    """Packed rows gathered back in the wrong order: the padded forward differs from each
    row run alone (a generic finding); the cached steps over the same padded batch disagree
    too and a cache hypothesis may fit the difference. The padding finding leads; the same
    cache finding without padding, or with the plain forward passing, keeps its place."""

    def cached(padded: bool) -> dict[str, Any]:
        r = _at("causal_self_attention", "cache.position_offset_wrong", "decoder.kv_cache")
        return {**r, "clause": ["11.6"], "metrics": {"dtype": "float64", "padded_call": padded}}

    rows = _at("causal_self_attention", "batch.padded_rows_differ", "decoder.batch_rows")
    assert [c["code"] for c in root_causes([cached(True), cached(True), rows])] == [
        "batch.padded_rows_differ",
        "cache.position_offset_wrong",
    ]
    assert top_cause([cached(True), cached(False), rows]) == "cache.position_offset_wrong"
    assert top_cause([cached(True)]) == "cache.position_offset_wrong"
