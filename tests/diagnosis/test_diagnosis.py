"""Diagnoses that name the cause: each case of a class, on a small
implementation, gets its specific code; probes that cannot measure say so; a run's failures
are grouped by root cause; the diagnosis benchmark's scores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _pytest.outcomes import Skipped

from tck.adapters import Adapter, load_adapter
from tck.adapters.mutants import matrix
from tck.conformance.checks import test_attention, test_gradients, test_positional
from tck.conformance.diagnosis.diagnosis import named_exception
from tck.conformance.runner.fingerprint_cli import build_fingerprint, failed
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure
from tck.reference.inputs import Shape, padding
from tck.reports.causes import root_causes, top_cause


def harness(adapter: Adapter | str, subject: str | None = None) -> Harness:
    adapter = load_adapter(adapter) if isinstance(adapter, str) else adapter
    subjects = adapter.subjects()
    chosen = next(s for s in subjects if subject is None or s.name == subject)
    return Harness(adapter, chosen, seed=0)


def oracle_failure(tck: Harness, shape: Shape | None = None) -> CheckFailure:
    inst = tck.instance()
    inputs = tck.inputs(inst, shape or Shape())
    with pytest.raises(CheckFailure) as failure:
        tck.assert_matches_oracle(inst, inputs)
    return failure.value


# ------------------------------------------------------------ explanations that search


@pytest.mark.spec("5.1", "5.2")
def test_three_conventions_at_once_are_named_together():
    """The Annotated Transformer's LayerNorm: unbiased std, eps outside the sqrt, eps 1e-6.
    No field alone explains it; the three together do, and the message names all three."""
    failure = oracle_failure(harness("mutants.layer_norm_annotated", "layer_norm"))
    assert failure.code == "layer_norm.eps_outside_sqrt"
    for words in ("eps_placement='outside_sqrt'", "variance='unbiased'", "eps=1e-06"):
        assert words in failure.message
    assert "3 conventions at once" in failure.message


@pytest.mark.spec("0.3", "5.1", "5.2")
def test_fingerprint_names_all_three_fields_and_exits_1(tmp_path: Path):
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "tck", "fingerprint"),
            *("--adapter", "mutants.layer_norm_annotated", "--only", "layer_norm"),
            *("--out", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    document = json.loads((tmp_path / "fingerprint.json").read_text())
    rows = document["subjects"]["layer_norm"]["properties"]
    shown = {field: rows[field]["shown"][0] for field in ("eps", "eps_placement", "variance")}
    assert shown == {"eps": 1e-6, "eps_placement": "outside_sqrt", "variance": "unbiased"}
    assert all(rows[f]["status"] == "mismatch" for f in shown)


@pytest.mark.spec("10.7", "2.1")
def test_float32_table_in_a_float64_subject_is_a_precision_finding():
    """A sinusoidal table computed in float64 and stored in float32: not a wrong frequency."""
    tck = harness("mutants.pe_float32_table")
    assert oracle_failure(tck).code == "numerics.float64_precision_lost"
    with pytest.raises(CheckFailure) as failure:
        test_positional.test_frequencies(tck)
    assert failure.value.code == "numerics.float64_precision_lost"
    assert "stored as float32" in failure.value.message


@pytest.mark.spec("9.1")
@pytest.mark.parametrize(
    ("mutant", "code"),
    [
        ("vit_patch_embed_norm", "vit.extra_norm_in_patch_embed"),
        ("vit_norm_pre", "blocks.extra_norm_before_layers"),
    ],
)
def test_an_extra_normalisation_is_named(mutant: str, code: str):
    failure = oracle_failure(harness(f"mutants.{mutant}"))
    assert failure.code == code
    assert "LayerNorm" in failure.message


@pytest.mark.spec("7.1")
def test_an_extra_norm_before_the_first_encoder_layer_is_named():
    """The same hypothesis on an encoder: a LayerNorm on the input before layer 0."""
    from tck.adapters import TorchEntry, TorchModuleAdapter
    from tck.adapters.reference import forwards
    from tck.reference import canonical_conventions
    from tck.reference import model as ref

    conventions = canonical_conventions("encoder")

    def make(config):
        module = ref.build("encoder", config, conventions)
        inner = module.forward
        norm = torch.nn.LayerNorm(config.d_model)
        module.forward = lambda x, keep=None: inner(norm.to(x.dtype)(x), keep)  # the bug
        return module

    adapter = TorchModuleAdapter(
        "norm-first-input",
        [TorchEntry("encoder", make=make, forward=forwards("top_left")["encoder"])],
    )
    failure = oracle_failure(harness(adapter))
    assert failure.code == "blocks.extra_norm_before_layers"


# --------------------------------------------------------------- named exceptions, state


@pytest.mark.spec("10.7", "4.4")
def test_a_fill_value_float16_cannot_hold_is_named():
    """masked_fill(-1e9) in float16 raises in torch; the suite names the overflow."""
    tck = harness("mutants.fill_value_fp16", "mha")
    inst = tck.instance(dtype="float16")
    with pytest.raises(RuntimeError) as raised:
        tck.run(inst, tck.inputs(inst))
    code, message = named_exception(raised.value, "float16")
    assert code == "numerics.fill_value_overflow"
    assert "float16" in message and "finfo" in message
    assert named_exception(ValueError("something else")) is None


@pytest.mark.spec("10.1")
def test_flaky_failure_is_state_carried_between_calls():
    """hypothesis raises FlakyFailure when an example fails, then passes on replay: a test
    whose outcome depends on how often it was called before."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.errors import Flaky

    calls = {"n": 0}

    @settings(database=None, derandomize=True, max_examples=5)
    @given(st.integers(0, 3))
    def check(x: int) -> None:
        calls["n"] += 1
        assert calls["n"] != 1  # the first call fails, its replay passes

    with pytest.raises(Flaky) as raised:
        check()
    code, message = named_exception(raised.value)
    assert code == "state.leaks_between_calls"
    assert "one call to the next" in message


@pytest.mark.spec("4.2", "10.1")
def test_a_mask_kept_from_an_earlier_call_is_state_carried_between_calls():
    """A mask cache keyed by shape: the second batch of the same shape gets the first's mask;
    a fresh instance computes it right, so the explanation is state, not a mask bug."""
    tck = harness("mutants.mask_cache_stale")
    inst = tck.instance()
    first = tck.inputs(inst, Shape(batch=2, lq=5, lk=7, lengths=(7, 3)))
    tck.assert_matches_oracle(inst, first)
    second = dict(first, key_padding=padding(np.array([2, 7]), 7))
    with pytest.raises(CheckFailure) as failure:
        tck.assert_matches_oracle(inst, second)
    assert failure.value.code == "state.leaks_between_calls"


@pytest.mark.spec("1.3", "10.8")
def test_a_padding_row_gradient_names_the_padding_row():
    tck = harness("mutants.embedding_no_padding_idx")
    with pytest.raises(CheckFailure) as failure:
        test_gradients.test_gradients(tck, "float64")
    assert failure.value.code == "gradients.padding_row"
    assert "the padding row" in failure.value.message
    test_gradients.test_gradients(harness("reference", "embedding"), "float64")


# ------------------------------------------------------------------------ honest probes


@pytest.mark.spec("3.1")
def test_a_probe_that_cannot_measure_says_not_measured_never_inf():
    tck = harness("reference", "attention")
    config = tck.config()
    saturated = np.full((4, 4), np.inf)  # every weight pair 0/1: log ratio inf
    with pytest.raises(Skipped, match="not measured"):
        test_attention.judge_scale(tck, saturated, config, "attention")
    assert "not_measured" in tck.record.metrics and "effective_scale" not in tck.record.metrics
    partly = np.array([[0.2, 0.2], [np.inf, 0.9]])  # some saturated, the rest disagree
    tck = harness("reference", "attention")
    with pytest.raises(Skipped, match="not measured"):
        test_attention.judge_scale(tck, partly, config, "attention")


@pytest.mark.spec("0.3")
def test_fingerprint_fails_on_a_declared_convention_it_could_not_measure():
    def row(check: str, status: str, metrics: dict[str, Any]) -> dict[str, Any]:
        return {
            "check": check,
            "subject": "ln",
            "component": "layer_norm",
            "status": status,
            "metrics": metrics,
            "diagnosis": {"code": "skip", "message": "why"},
        }

    document = {
        "adapter": {"name": "x", "conventions": {"ln": {"eps": 1e-5}}},
        "results": [
            row("fingerprint.eps", "skip", {"not_measured": "not measured: no value of eps"}),
            row("fingerprint.variance", "skip", {}),  # a capability the adapter lacks
        ],
    }
    fingerprint = build_fingerprint(document)
    assert fingerprint["unmeasurable"] == ["ln.eps"]
    assert fingerprint["subjects"]["ln"]["properties"]["variance"]["status"] == "not measured"
    assert failed(fingerprint)
    document["results"] = document["results"][1:]
    assert not failed(build_fingerprint(document))


# ---------------------------------------------------------------------- root cause first


def _r(subject: str, check: str, code: str, status: str = "fail", **metrics: Any) -> dict:
    return {
        "check": check,
        "subject": subject,
        "status": status,
        "diagnosis": {"code": code, "message": code},
        "metrics": metrics,
    }


@pytest.mark.spec("0.3")
def test_root_causes_lead_and_generic_codes_join_them():
    results = [
        _r("enc", "equality.oracle", "blocks.oracle_mismatch"),
        _r("enc", "fingerprint.variance", "layer_norm.unbiased_variance"),
        _r("enc", "gradients.gradients", "gradients.oracle_mismatch"),
        _r("mha", "equality.oracle", "attention.oracle_mismatch"),  # nothing better: alone
        _r("mha", "x", "", status="pass"),
    ]
    causes = root_causes(results)
    assert [c["code"] for c in causes] == [
        "layer_norm.unbiased_variance",
        "attention.oracle_mismatch",
    ]
    assert [s["code"] for s in causes[0]["symptoms"]] == [
        "blocks.oracle_mismatch",
        "layer_norm.unbiased_variance",
        "gradients.oracle_mismatch",
    ]
    assert top_cause(results) == "layer_norm.unbiased_variance"
    assert top_cause([]) is None


@pytest.mark.spec("5.2")
def test_codes_of_one_combination_are_one_cause():
    together = {"eps_placement": "outside_sqrt", "variance": "unbiased", "eps": 1e-6}
    results = [
        _r("ln", "equality.oracle", "layer_norm.eps_outside_sqrt", explained_by=together),
        _r("ln", "fingerprint.variance", "layer_norm.unbiased_variance"),
        _r("ln", "fingerprint.eps", "layer_norm.eps_wrong"),
    ]
    causes = root_causes(results)
    assert len(causes) == 1 and causes[0]["code"] == "layer_norm.eps_outside_sqrt"
    assert len(causes[0]["symptoms"]) == 3


@pytest.mark.spec("0.3")
def test_state_outranks_what_it_makes_other_checks_see():
    results = [
        _r("mha", "batch.rows", "batch.rows_interact"),
        _r("mha", "batch.rows2", "batch.rows_interact"),
        _r("mha", "masks.padding", "state.leaks_between_calls"),
    ]
    assert top_cause(results) == "state.leaks_between_calls"


@pytest.mark.spec("0.3")
def test_diagnosis_scores_count_detection_and_top_cause_accuracy():
    runs = {
        "a": [_r("s", "c", "mask.masked_key_gradient"), _r("s", "c2", "mask.polarity_inverted")],
        "b": {"results": [_r("s", "c", "blocks.oracle_mismatch")]},
        "c": [_r("s", "c", "x.y", status="pass")],
    }
    expected = {
        "a": {"mask.polarity_inverted"},
        "b": {"blocks.oracle_mismatch"},
        "c": {"x.y"},
    }
    scores = matrix.diagnosis_scores(runs, expected)
    assert scores["count"] == 3
    assert scores["detection_rate"] == pytest.approx(2 / 3)
    assert scores["undetected"] == ["c"]
    # a: a masked key's gradient says what the output does, polarity why: the cause leads
    assert scores["mutants"]["a"]["top_cause"] == "mask.polarity_inverted"
    assert scores["accuracy"] == pytest.approx(2 / 3)
    assert scores["mutants"]["b"]["diagnosed"]
    assert "detection 66.7%" in matrix.format_scores(scores)


# ------------------------------------------------ positions, patches, overflow


@pytest.mark.spec("2.1", "2.3")
def test_positions_offset_or_ignored_are_named():
    assert oracle_failure(harness("mutants.pe_position_offset")).code == (
        "positional.position_offset"
    )
    tck = harness("mutants.rope_positions_ignored")
    inst = tck.instance()
    inputs = tck.inputs(inst)
    inputs["positions"] = inputs["positions"] + 3  # not 0 .. L-1
    with pytest.raises(CheckFailure) as failure:
        tck.assert_matches_oracle(inst, inputs)
    assert failure.value.code == "rope.positions_ignored"


@pytest.mark.spec("9.1")
def test_a_patch_flattened_channels_last_is_named():
    failure = oracle_failure(harness("mutants.patch_flatten_channels_last"))
    assert failure.code == "vit.patch_flatten_order"


@pytest.mark.spec("3.1", "10.7")
def test_a_softmax_without_its_max_overflows_in_float32_by_name():
    from tck.conformance.checks import test_numerics

    tck = harness("mutants.softmax_no_max")
    with pytest.raises(CheckFailure) as failure:
        test_numerics.test_large_magnitudes(tck, "float32")
    assert failure.value.code == "numerics.overflow"


@pytest.mark.spec("7.3", "9.5", "2.3")
@pytest.mark.parametrize(
    ("mutant", "code"),
    [
        ("post_ln_final_norm", "blocks.final_norm_extra"),  # the extra norm has no params
        ("vit_gap_pool", "vit.pooling_mean"),
        ("vit_mean_with_cls", "vit.pooling_mean_with_cls"),
        ("rope_position_offset", "rope.position_offset"),
    ],
)
def test_benchmark_mutants_get_their_code_from_the_oracle_comparison(mutant: str, code: str):
    assert oracle_failure(harness(f"mutants.{mutant}")).code == code
