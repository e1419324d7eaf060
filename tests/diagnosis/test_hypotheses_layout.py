"""Explanations by the attention core and the ViT token layout
(conformance/diagnosis/hypotheses_layout.py) and the root-cause ranking they feed
(reports/causes.py):
a softmax over any axis but the keys, a bool mask added to the scores, a causal mask without
its diagonal (NaN rows included), the patch grid read in another order, the position table
added before the class token; a reproduced explanation leads a property's finding, a forward
mismatch a gradient one."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support.oracle_failure import first_oracle_failure

from tck.adapters import load_adapter
from tck.conformance.diagnosis.hypotheses_layout import (
    cls_position_hypotheses,
    patch_layout_hypotheses,
    softmax_axis_hypotheses,
)
from tck.conformance.diagnosis.hypotheses_masks import mask_bias_hypotheses
from tck.conformance.toolkit.harness import Harness
from tck.reference import oracle
from tck.reference.inputs import Shape
from tck.reference.variants import oracle_variant
from tck.reports.causes import root_causes, top_cause


@pytest.mark.parametrize(
    ("mutant", "code"),
    [
        ("softmax_batch_axis", "attention.softmax_axis_wrong"),
        ("softmax_query_axis", "attention.softmax_axis_wrong"),
        ("mask_added_padding", "mask.added_as_bias"),
        ("decoder_causal_diagonal", "mask.causal_diagonal_hidden"),
        ("vit_patch_grid_column_major", "vit.patch_order"),
        ("vit_pos_before_cls", "vit.cls_pos_embed_missing"),
    ],
)
def test_layout_hypotheses_name_their_mutant(mutant: str, code: str) -> None:
    failure = first_oracle_failure(f"mutants.{mutant}")
    assert failure.code == code, failure.message
    assert "the spec's with" in failure.message


def _qkv(seed: int = 0) -> tuple[np.ndarray, ...]:
    g = np.random.default_rng(seed)
    return tuple(g.standard_normal((2, 3, 4, 5)) for _ in range(3))


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_softmax_axis_hypothesis_is_the_softmax_over_that_axis(axis: int) -> None:
    q, k, v = _qkv()

    def compute(alternative=None) -> np.ndarray:  # type: ignore[no-untyped-def]
        core = oracle if alternative is None else oracle_variant(alternative.pieces)
        return core.scaled_dot_product_attention(q, k, v)

    golds = [compute(alternative) for alternative in softmax_axis_hypotheses("attention")]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(5)
    e = np.exp(scores - scores.max(axis=axis, keepdims=True))
    np.testing.assert_allclose(golds[2 * axis], (e / e.sum(axis=axis, keepdims=True)) @ v)
    right = compute()
    assert all(not np.allclose(g, right) for g in golds)  # none can explain a correct subject


def test_mask_added_hypotheses_add_the_mask_or_its_complement() -> None:
    q, k, v = _qkv(1)
    keep = np.array([True, True, False, True])

    golds = [
        oracle_variant(a.pieces).scaled_dot_product_attention(q, k, v, keep[None, :])
        for a in mask_bias_hypotheses("attention", {})
    ]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(5)
    np.testing.assert_allclose(golds[0], oracle.softmax(scores + keep) @ v)
    # scores + (1 - keep) is scores - keep shifted by a constant per row: the offset -1
    np.testing.assert_allclose(golds[1], oracle.softmax(scores + ~keep) @ v)


def test_the_bias_family_covers_the_causal_triangle() -> None:
    """One family over the combined mask: a causal call's triangle added as 0/1 is named."""
    q, k, v = _qkv(1)
    tril = np.tril(np.ones((q.shape[-2], k.shape[-2]), bool))
    plus_one = next(iter(mask_bias_hypotheses("causal_self_attention", {})))
    gold = oracle_variant(plus_one.pieces).scaled_dot_product_attention(q, k, v, tril)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(5)
    np.testing.assert_allclose(gold, oracle.softmax(scores + tril) @ v)


def test_patch_layouts_cover_every_grid_order_and_exclude_the_spec() -> None:
    g = np.random.default_rng(2)
    images, weight, bias = g.standard_normal((1, 2, 4, 6)), g.standard_normal((3, 2, 2, 2)), 0.0

    def compute(alternative=None) -> np.ndarray:  # type: ignore[no-untyped-def]
        core = oracle if alternative is None else oracle_variant(alternative.pieces)
        return core.patch_embed(images, weight, np.zeros(3) + bias, patch_size=2)

    right = compute()
    golds = [compute(alternative) for alternative in patch_layout_hypotheses("patch_embed")]
    assert len(golds) == 5 and all(not np.allclose(gold, right) for gold in golds)
    conv = right.reshape(1, 2, 3, 3).transpose(0, 3, 1, 2)  # (B, D, h, w) as a conv gives it
    no_transpose = conv.reshape(1, -1, 3)
    column_major = conv.transpose(0, 3, 2, 1).reshape(1, -1, 3)
    assert any(np.allclose(gold, no_transpose) for gold in golds)
    assert any(np.allclose(gold, column_major) for gold in golds)


def test_an_output_nan_everywhere_is_evidence_for_no_alternative() -> None:
    """A one-token call that is NaN at every position is reproduced by triu(diagonal=0) with a
    -inf fill, but also by any alternative that empties a row the layers then spread: a single
    value tells none apart, so the explainer credits none and names the overflow. The hidden
    diagonal is named by the mask check, which first probes that the subject is defined
    without a mask and under key padding (``decoder_causal_diagonal`` above)."""
    from tck.conformance.diagnosis.explain import explain

    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == "causal_self_attention")
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance()
    inputs = tck.inputs(inst, Shape(batch=2, lq=1, lk=1))
    gold = tck.gold(inst, inputs)
    assert np.isfinite(gold).all()
    test = np.full_like(gold, np.nan)
    code, message = explain(tck, inst, inputs, test, tck.compare(inst, test, gold))
    assert code == "numerics.overflow", message
    assert "the spec's with" not in message


def test_cls_position_hypotheses_only_for_vit() -> None:
    assert not list(cls_position_hypotheses("encoder"))
    assert list(cls_position_hypotheses("vit"))


# ------------------------------------------------------------------------ the ranking


def _r(subject: str, check: str, code: str, **metrics: Any) -> dict:
    return {
        "check": check,
        "subject": subject,
        "status": "fail",
        "diagnosis": {"code": code, "message": code},
        "metrics": metrics,
    }


@pytest.mark.spec("0.3")
def test_a_forward_mismatch_outranks_the_gradient_mismatch_it_causes() -> None:
    results = [
        _r("vit", "gradients.gradients", "gradients.oracle_mismatch"),
        _r("vit", "gradients.gradients", "gradients.oracle_mismatch"),
        _r("vit", "equality.oracle", "vit.oracle_mismatch"),
    ]
    causes = root_causes(results)
    assert [c["code"] for c in causes] == ["vit.oracle_mismatch"]
    assert len(causes[0]["symptoms"]) == 3


@pytest.mark.spec("0.3")
def test_a_reproduced_explanation_leads_a_property_finding() -> None:
    results = [
        _r("attention", "masks.causal_no_leak", "mask.causal_leak"),
        _r("attention", "masks.causal_diagonal", "mask.causal_leak"),
        _r(
            "attention",
            "equality.oracle",
            "attention.softmax_axis_wrong",
            reproduced_by="attention.softmax_axis_wrong",
        ),
    ]
    assert top_cause(results) == "attention.softmax_axis_wrong"


@pytest.mark.spec("0.3")
def test_a_reproduced_symptom_code_counts_as_a_cause() -> None:
    results = [
        _r("mha", "masks.causal_no_leak", "mask.causal_leak"),
        _r("mha", "masks.padding_invariance", "mask.ignored"),  # a property: a symptom
        _r("mha", "equality.oracle", "mask.ignored", reproduced_by="mask.ignored"),
    ]
    causes = root_causes(results)
    assert causes[0]["code"] == "mask.ignored" and causes[0]["reproduced"]
    # without the reproduction, the property's symptom stays below the cause
    assert top_cause(results[:2]) == "mask.causal_leak"
