"""Heads folded into the batch (conformance/diagnosis/hypotheses_folded.py): attention in
fairseq's time-first ``[L, B, D]`` layout with the heads folded into ``[B * H, L, d]``. A
missing transpose there mixes the batch's rows; each bug, written here independently of the
hypotheses, is named by its class's code on a batched call, ahead of the symptom
``batch.rows_interact`` in the run's root causes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from support.oracle_failure import first_oracle_failure

from tck.adapters import load_adapter
from tck.conformance.diagnosis.alternatives import output_of
from tck.conformance.diagnosis.explain import explain
from tck.conformance.diagnosis.hypotheses_folded import folded_hypotheses
from tck.conformance.toolkit.harness import Harness
from tck.reference import oracle
from tck.reference.inputs import Shape
from tck.reference.variants import expected_under, oracle_variant
from tck.reports.causes import top_cause


def _time_first_queries() -> dict[str, Callable[..., Any]]:
    """Queries viewed as [B*H, L, d] from time-first memory (fairseq's
    ``q.view(B * H, L, d)`` for ``q.view(L, B * H, d).transpose(0, 1)``); keys and values
    as the spec splits them."""
    calls = [0]

    def split_heads(x: Any, n_heads: int) -> np.ndarray:
        calls[0] += 1
        x = np.asarray(x, dtype=np.float64)
        b, length, width = x.shape
        if calls[0] % 3 != 1:  # the oracle splits q, k, v in that order
            return x.reshape(b, length, n_heads, width // n_heads).transpose(0, 2, 1, 3)
        time_first = np.ascontiguousarray(x.transpose(1, 0, 2))  # [L, B, D] in memory
        return time_first.reshape(b * n_heads, length, width // n_heads).reshape(
            b, n_heads, length, width // n_heads
        )

    return {"split_heads": split_heads}


def _time_first_merge() -> dict[str, Callable[..., Any]]:
    """[B*H, L, d] heads viewed as [L, B, D] without ``transpose(0, 1)`` first."""

    def merge_heads(x: Any) -> np.ndarray:
        b, h, length, d = np.shape(x)
        flat = np.ascontiguousarray(np.asarray(x, dtype=np.float64)).reshape(-1)
        return flat.reshape(length, b, h * d).transpose(1, 0, 2)

    return {"merge_heads": merge_heads}


def _softmax_over_folded_axis() -> dict[str, Callable[..., Any]]:
    """softmax(dim=0) on [B*H, Lq, Lk] scores, masked scores at -inf."""

    def sdpa(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
        q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
        scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
        b, h, lq, lk = scores.shape
        folded = scores.reshape(b * h, lq, lk)
        if keep_mask is not None:
            keep = np.broadcast_to(np.asarray(keep_mask), scores.shape).reshape(b * h, lq, lk)
            folded = np.where(keep, folded, -np.inf)
        with np.errstate(invalid="ignore"):
            e = np.exp(folded - folded.max(axis=0, keepdims=True))
            weights = np.nan_to_num(e / e.sum(axis=0, keepdims=True))
        return weights.reshape(b, h, lq, lk) @ v

    return {"scaled_dot_product_attention": sdpa}


BUGS = {
    "queries folded": (_time_first_queries, "attention.heads_split_wrong_order"),
    "heads merged": (_time_first_merge, "attention.heads_merged_wrong_order"),
    "softmax over B*H": (_softmax_over_folded_axis, "attention.softmax_axis_wrong"),
}


@pytest.mark.parametrize("component", ["encoder_layer", "causal_self_attention", "vit"])
@pytest.mark.parametrize("bug", sorted(BUGS))
def test_a_folded_layout_bug_is_named_on_a_batched_call(component: str, bug: str) -> None:
    build, code = BUGS[bug]
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == component)
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance()
    tck.run = lambda inst, given: expected_under(  # type: ignore[method-assign]
        oracle_variant(build()), component, given, inst.params, inst.config, inst.conventions
    )
    inputs = tck.inputs(inst, Shape())
    assert np.shape(next(iter(inputs.values())))[0] > 1  # the class needs a batch
    test = tck.run(inst, inputs)
    found, message = explain(
        tck, inst, inputs, test, tck.compare(inst, test, tck.gold(inst, inputs))
    )
    assert found == code, message


def test_each_folded_hypothesis_changes_the_output_of_a_batched_call() -> None:
    """None is degenerate: each one differs from the spec on a batch of two (with one row,
    the time-first and the batch-first views coincide, and ``alternatives.fits`` keeps the
    spec-equal ones from counting)."""
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == "encoder_layer")
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance()
    inputs = tck.inputs(inst, Shape())
    base = tck.gold(inst, inputs)
    found = list(folded_hypotheses("encoder_layer"))
    assert {a.code for a in found} == {
        "attention.heads_split_wrong_order",
        "attention.heads_merged_wrong_order",
        "attention.softmax_axis_wrong",
    }
    for alternative in found:
        gold = output_of(
            "encoder_layer", inputs, inst.params, inst.config, inst.conventions, alternative
        )
        assert gold.shape == base.shape
        assert not np.allclose(gold, base), alternative.message
    assert not list(folded_hypotheses("layer_norm"))  # no attention, no hypothesis
    assert oracle.split_heads.__module__ == "tck.reference.oracle"


def test_the_folded_mutant_is_named_by_its_class() -> None:
    failure = first_oracle_failure("mutants.heads_folded_time_first")
    assert failure.code == "attention.heads_split_wrong_order", failure.message


def _result(code: str, check: str, *, reproduced: bool) -> dict[str, Any]:
    metrics = {"reproduced_by": code, "dtype": "float64"} if reproduced else {}
    return {
        "check": check,
        "subject": "encoder_layer",
        "component": "encoder_layer",
        "status": "fail",
        "diagnosis": {"code": code, "message": ""},
        "metrics": metrics,
    }


def test_the_reproduced_layout_cause_leads_the_batch_symptom() -> None:
    """Rows interacting is what a folded layout does; the hypothesis that reproduced the
    batched output names why, and leads even when the batch checks fail more often."""
    results = [
        _result("batch.rows_interact", "blocks.batch_independence", reproduced=False),
        _result("batch.rows_interact", "masks.fully_masked_rows", reproduced=False),
        _result("batch.rows_interact", "masks.polarity", reproduced=False),
        _result("attention.heads_split_wrong_order", "equality.oracle", reproduced=True),
    ]
    assert top_cause(results) == "attention.heads_split_wrong_order"
