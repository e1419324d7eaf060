"""numerics.norm_statistics_mean_error: norm statistics formed in float16 are named through a
layer whose residual stream hides them from the maximum-error rule; float32 statistics pass
(conformance/checks/test_norm_precision.py)."""

from __future__ import annotations

import dataclasses

import pytest

from tck.adapters import load_adapter
from tck.conformance.checks import test_norm_precision as check
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure


def _harness(adapter: str, name: str) -> Harness:
    loaded = load_adapter(adapter)
    subject = next(s for s in loaded.subjects() if name in (s.name, s.component))
    return Harness(loaded, subject, seed=0)


def test_float16_statistics_inside_a_pre_ln_layer_are_named() -> None:
    tck = _harness("mutants.encoder_layer_norm_half_statistics", "encoder_layer")
    with pytest.raises(CheckFailure) as failure:
        check.test_norm_statistics_mean_error(tck)
    assert failure.value.code == "numerics.norm_statistics_low_precision", failure.value.message
    assert failure.value.metrics["mean_error_ratio"] > check.K_MEAN_NORM


def test_declared_input_dtype_statistics_are_held_to_the_naive_run(monkeypatch) -> None:
    """The same layer declaring half_precision="input_dtype" (SPEC.md §10.10): held to the run
    with every quantity in float16, it gets a convention row, not a failure."""
    tck = _harness("mutants.encoder_layer_norm_half_statistics", "encoder_layer")
    made = tck.instance
    conventions = dataclasses.replace(tck.subject.conventions, half_precision="input_dtype")
    subject = dataclasses.replace(tck.subject, conventions=conventions)

    def declared(*args, **kwargs):
        return dataclasses.replace(made(*args, **kwargs), subject=subject)

    monkeypatch.setattr(tck, "instance", declared)
    check.test_norm_statistics_mean_error(tck)
    assert any("half_precision='input_dtype'" in m for _, m in tck.record.conventions)


@pytest.mark.parametrize(
    ("adapter", "name"),
    [
        ("reference", "layer_norm"),
        ("reference", "encoder_layer[pre_gelu]"),
        ("reference", "vit"),
        ("reference", "causal_lm"),
        ("reference", "decoder_block[llama]"),
        ("torch.nn", "encoder[norm_first]"),
    ],
)
def test_float32_statistics_pass(adapter: str, name: str) -> None:
    tck = _harness(adapter, name)
    check.test_norm_statistics_mean_error(tck)
    assert tck.record.metrics["mean_error_ratio"] <= check.K_MEAN_NORM


def test_post_ln_is_skipped() -> None:
    with pytest.raises(pytest.skip.Exception):
        check.test_norm_statistics_mean_error(_harness("reference", "encoder_layer"))


def test_the_check_reaches_every_component_with_a_norm() -> None:
    for name in ("layer_norm", "rms_norm", "encoder_layer", "encoder", "decoder_block", "vit"):
        assert name in check.NORMED
    for name in ("attention", "ffn", "causal_self_attention"):
        assert name not in check.NORMED
