"""Wiring by class: a later sublayer adding its output to the layer's input instead of its
own input (``out = x + ffn(norm2(h))``), a module computing with a sibling's parameters
(``ln_2`` with ``ln_1``'s weights, an untied head with the token embedding), and a
fully-masked row's NaN that is the same missing max subtraction as an overflow. Each bug is
written here, independently of the hypotheses, and named by its class's code."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from tck.adapters import load_adapter
from tck.conformance.diagnosis.explain import explain
from tck.conformance.toolkit.harness import Harness
from tck.reference import oracle
from tck.reference.inputs import Shape
from tck.reference.variants import expected_under, oracle_variant
from tck.reports.causes import root_causes


def _named(component: str, *, pieces=None, params=None, config=None) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == component)
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance()
    if config is not None:
        inst = tck.instance(config(inst.config))
    wrong = params(inst.params) if params else inst.params
    variant = oracle_variant(pieces()) if pieces else None
    tck.run = lambda inst, given: expected_under(  # type: ignore[method-assign]
        variant, component, given, wrong, inst.config, inst.conventions
    )
    inputs = tck.inputs(inst, Shape())
    test = tck.run(inst, inputs)
    return explain(tck, inst, inputs, test, tck.compare(inst, test, tck.gold(inst, inputs)))


def _ffn_from_layer_input() -> dict[str, Any]:
    """Each layer's second sublayer adds its output to the layer's input."""
    state: dict[str, Any] = {}

    def sublayer(x, params, norm_prefix, conventions, fn):  # type: ignore[no-untyped-def]
        if norm_prefix.endswith("norm1."):
            state["input"] = np.asarray(x, dtype=np.float64)
            return oracle._sublayer(x, params, norm_prefix, conventions, fn)
        return state["input"] + fn(oracle.norm(x, params, norm_prefix, conventions))

    return {"_sublayer": sublayer}


@pytest.mark.parametrize("component", ["decoder_block", "causal_lm"])
def test_a_sublayer_added_to_the_layer_input_is_named(component: str) -> None:
    code, message = _named(component, pieces=_ffn_from_layer_input)  # pre-LN subjects
    assert code == "blocks.residual_from_layer_input", message
    assert "layer's input" in message


def _norm2_reads_norm1(params):  # type: ignore[no-untyped-def]
    out = dict(params)
    for key in params:
        if ".norm2." in f".{key}":
            out[key] = params[key.replace("norm2.", "norm1.")]
    return out


@pytest.mark.parametrize("component", ["decoder_block", "causal_lm"])
def test_a_norm_with_its_sibling_s_weights_is_named(component: str) -> None:
    code, message = _named(component, params=_norm2_reads_norm1)
    assert code == "params.read_from_other_module", message
    assert "'norm2'" in message and "'norm1'" in message


def test_an_untied_head_read_from_the_embedding_is_named() -> None:
    def untie(config):  # type: ignore[no-untyped-def]
        return dataclasses.replace(config, tie_weights=False)

    def tie(params):  # type: ignore[no-untyped-def]
        return {**params, "lm_head.weight": params["embedding.weight"]}

    code, message = _named("causal_lm", params=tie, config=untie)
    assert code == "model.head_tied_to_embedding", message


def _result(subject: str, code: str) -> dict[str, Any]:
    return {
        "check": "x",
        "subject": subject,
        "component": subject,
        "status": "fail",
        "diagnosis": {"code": code, "message": code},
        "metrics": {},
    }


def test_a_nan_empty_row_joins_the_overflow_of_the_same_subject() -> None:
    """exp without the max subtraction: an empty row's 0/0 and a large score's inf are one
    cause; on a subject without an overflow the NaN row is the convention finding."""
    results = [
        _result("causal_self_attention", "mask.fully_masked_rows_nan"),
        _result("causal_self_attention", "mask.fully_masked_rows_nan"),
        _result("causal_self_attention", "numerics.overflow"),
    ]
    causes = root_causes(results)
    assert [c["code"] for c in causes] == ["numerics.overflow"]
    assert len(causes[0]["symptoms"]) == 3
    alone = root_causes([_result("attention", "mask.fully_masked_rows_nan")])
    assert [c["code"] for c in alone] == ["mask.fully_masked_rows_nan"]


def test_a_nan_empty_row_joins_the_float32_step_that_made_its_fill_minus_infinity() -> None:
    """A float32 softmax in a float64 build: finfo(float64).min cast to float32 is -inf, so a
    row whose keys are all masked is 0/0. The NaN rows are that island's consequence, however
    many checks show them."""
    results = [
        _result("encoder_layer", "mask.fully_masked_rows_nan"),
        _result("encoder_layer", "mask.fully_masked_rows_nan"),
        _result("encoder_layer", "mask.fully_masked_rows_nan"),
        _result("encoder_layer", "numerics.float32_island"),
    ]
    causes = root_causes(results)
    assert [c["code"] for c in causes] == ["numerics.float32_island"]
    assert len(causes[0]["symptoms"]) == 4


def test_a_model_s_nan_rows_join_the_overflow_of_its_attention() -> None:
    """The stress that shows the overflow runs on the attention alone; the model's padded
    rows, 0/0 from the same softmax, and their symptoms join it."""
    results = [
        _result("causal_lm", "mask.fully_masked_rows_nan"),
        _result("causal_lm", "numerics.nonfinite_output"),
        _result("causal_lm", "numerics.nonfinite_output"),
        _result("causal_self_attention", "numerics.overflow"),
    ]
    causes = root_causes(results)
    assert [c["code"] for c in causes] == ["numerics.overflow"]
    assert sorted(causes[0]["subjects"]) == ["causal_lm", "causal_self_attention"]
    assert len(causes[0]["symptoms"]) == 4


def test_a_learned_table_never_added_is_named_before_rope() -> None:
    def no_table(params):  # type: ignore[no-untyped-def]
        return {**params, "pos_embedding.weight": np.zeros_like(params["pos_embedding.weight"])}

    code, message = _named("causal_lm", params=no_table)
    assert code == "positional.positions_ignored", message


def test_a_learned_table_read_one_row_late_is_named_without_position_inputs() -> None:
    def one_late(params):  # type: ignore[no-untyped-def]
        table = np.asarray(params["pos_embedding.weight"])
        return {**params, "pos_embedding.weight": np.concatenate([table[1:], table[-1:]])}

    code, message = _named("causal_lm", params=one_late)
    assert code == "positional.position_offset", message
    assert "p +1" in message


def test_rms_norm_eps_outside_the_root_is_named_on_rows_of_small_scale() -> None:
    def outside(x, weight=None, *, eps=1e-5):  # type: ignore[no-untyped-def]
        x = np.asarray(x, dtype=np.float64)
        return x / (np.sqrt((x * x).mean(axis=-1, keepdims=True)) + eps) * np.asarray(weight)

    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == "rms_norm")
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance()
    variant = oracle_variant({"rms_norm": outside})
    tck.run = lambda inst, given: expected_under(  # type: ignore[method-assign]
        variant, "rms_norm", given, inst.params, inst.config, inst.conventions
    )
    inputs = tck.inputs(inst, Shape())
    inputs["x"] = inputs["x"] * 1e-3  # rows of root mean square ~1e-3: eps matters
    test = tck.run(inst, inputs)
    code, message = explain(
        tck, inst, inputs, test, tck.compare(inst, test, tck.gold(inst, inputs))
    )
    assert code == "layer_norm.eps_outside_sqrt", message
