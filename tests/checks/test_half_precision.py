"""Half precision (SPEC.md §10.10): the careful run, the inputs that reach where half
precision breaks, the findings that name the quantity, and no false findings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tck.adapters import Adapter, Subject, load_adapter
from tck.adapters.mutants import layer_norm_low_precision, tutorial
from tck.conformance.checks import test_numerics as checks
from tck.conformance.diagnosis import precision
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure
from tck.reference import Conventions
from tck.reference.model import LayerNorm, RMSNorm, computed_in_input_dtype, rope
from tck.reference.tolerance import compare

REFERENCE = load_adapter("reference")
HALF = ("float16", "bfloat16")


def subject(adapter: Adapter, name: str) -> Subject:
    return next(s for s in adapter.subjects() if s.name == name)


def run_check(adapter: Adapter, name: str, check, dtype: str) -> Harness:
    """Run one numerics check on one subject; its CheckFailure propagates."""
    tck = Harness(adapter, subject(adapter, name), seed=0)
    check(tck, dtype)
    return tck


def outlier_rows(d: int = 24) -> torch.Tensor:
    x = np.random.default_rng(0).standard_normal((2, 5, d))
    return torch.from_numpy(checks.outlier_activations(x, np.random.default_rng(1)))


# ------------------------------------------------------------------ the careful run


@pytest.mark.spec("10.10", "5.1", "5.3")
@pytest.mark.parametrize("norm", [LayerNorm, RMSNorm])
def test_careful_norm_keeps_statistics_in_float32_and_the_hypothesis_does_not(norm):
    """The outlier rows square past 65504: the careful norm is within a few float16 ulps of
    float64; with its statistics in float16 (the hypothesis) the row collapses."""
    x = outlier_rows()
    assert ((x - x.mean(-1, keepdim=True)).abs().amax(-1) > 256).all()  # every row
    exact = norm(24).double()(x)
    half = norm(24).half()
    careful = half(x.half()).double()
    assert torch.isfinite(careful).all()
    assert (careful - exact).abs().max() < 20 * 2.0**-11 * exact.abs().max()
    with computed_in_input_dtype("norm_statistics"):
        naive = half(x.half()).double()
    assert (naive - exact).abs().max() > 1.0  # collapsed to the bias / to zero
    # float32 and float64 are untouched by the switch: it only concerns half dtypes
    with computed_in_input_dtype("norm_statistics"):
        assert torch.equal(norm(24).double()(x), exact)


@pytest.mark.spec("10.10", "3.1")
def test_careful_softmax_sums_in_float32_and_the_hypothesis_overflows():
    from tck.reference.model import scaled_dot_product_attention as sdpa

    q = torch.full((1, 1, 2, 4), 2.0, dtype=torch.float16)
    k = torch.full((1, 1, 11, 4), 2.5, dtype=torch.float16)  # scores 10: sum 242,000
    v = torch.randn(1, 1, 11, 3).half()
    exact = sdpa(q.double(), k.double(), v.double())
    assert torch.allclose(sdpa(q, k, v).double(), exact, atol=2e-3)
    with computed_in_input_dtype("softmax"):
        assert torch.equal(sdpa(q, k, v), torch.zeros(1, 1, 2, 3, dtype=torch.float16))
        assert torch.isnan(sdpa(q * 2, k, v)).all()  # scores 20: exp itself is inf


@pytest.mark.spec("10.10", "2.3")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_careful_rope_forms_angles_in_float64_and_the_hypothesis_rounds_them(dtype):
    x = torch.randn(1, 1, 4, 8, dtype=torch.float64)
    positions = torch.tensor([0, 257, 4097, 8191])
    exact = rope(x, positions)
    assert (rope(x.to(dtype), positions).double() - exact).abs().max() < 0.05
    with computed_in_input_dtype("rope_angles"):
        assert (rope(x.to(dtype), positions).double() - exact).abs().max() > 0.3
    with pytest.raises(ValueError, match="unknown quantities"), computed_in_input_dtype("scores"):
        pass


# ------------------------------------------------------------ findings that name the quantity


@pytest.mark.spec("10.10", "5.1", "5.3", "5.4")
@pytest.mark.parametrize(
    "mutant", ["layer_norm_low_precision", "rms_norm_low_precision", "scale_norm_low_precision"]
)
def test_norm_with_float16_statistics_fails_in_float16_naming_the_statistics(mutant):
    adapter = load_adapter(f"mutants.{mutant}")
    name = adapter.subjects()[0].name
    with pytest.raises(CheckFailure) as failure:
        run_check(adapter, name, checks.test_outlier_activations, "float16")
    assert failure.value.code == "numerics.norm_statistics_low_precision"
    assert "statistics" in failure.value.message and "float16" in failure.value.message
    for dtype in ("float32", "bfloat16"):  # the same module, where nothing overflows
        tck = run_check(adapter, name, checks.test_outlier_activations, dtype)
        assert tck.record.calls and all(call["passed"] for call in tck.record.calls)


@pytest.mark.spec("10.10", "3.1")
@pytest.mark.parametrize("name", ["attention", "mha"])
def test_softmax_in_float16_is_named_for_its_sum_and_its_overflow(name):
    adapter = load_adapter("mutants.softmax_low_precision")
    with pytest.raises(CheckFailure) as summed:
        run_check(adapter, name, checks.test_softmax_sum_beyond_float16, "float16")
    assert summed.value.code == "numerics.softmax_low_precision"
    with pytest.raises(CheckFailure) as overflowed:
        run_check(adapter, name, checks.test_softmax_exp_beyond_float16, "float16")
    assert overflowed.value.code == "numerics.overflow"
    assert "softmax" in overflowed.value.message  # the hypothesis that reproduces it
    for dtype in ("float32", "bfloat16"):
        run_check(adapter, name, checks.test_softmax_sum_beyond_float16, dtype)


@pytest.mark.spec("10.10", "2.3")
@pytest.mark.parametrize("dtype", HALF)
def test_rope_with_16_bit_angles_is_named_for_its_angles(dtype):
    adapter = load_adapter("mutants.rope_low_precision")
    with pytest.raises(CheckFailure) as failure:
        run_check(adapter, "rope", checks.test_long_positions, dtype)
    assert failure.value.code == "numerics.rope_angles_low_precision"


@pytest.mark.spec("10.10", "0.3")
def test_declared_input_dtype_gets_a_convention_row_not_a_pass():
    declared = tutorial.mutant(
        "layer_norm_low_precision_declared",
        tutorial.layer_norm_entry(
            layer_norm_low_precision.LayerNorm,
            conventions=Conventions(half_precision="input_dtype"),
        ),
    )
    tck = run_check(declared, "layer_norm", checks.test_outlier_activations, "float16")
    assert [code for code, _ in tck.record.conventions] == [precision.DECLARED]
    assert "half_precision='input_dtype'" in tck.record.conventions[0][1]
    assert Conventions(half_precision="input_dtype").deviations() == {
        "half_precision": ("float32", "input_dtype")
    }
    with pytest.raises(ValueError, match="half_precision"):
        Conventions(half_precision="float16")  # type: ignore[arg-type]


@pytest.mark.spec("10.10", "10.7")
def test_hypothesis_must_reproduce_the_output_not_just_differ():
    gold = np.array([1.0, 2.0, 3.0])
    test = np.array([0.0, 0.0, 0.0])
    assert precision._explains(test, test.copy(), gold, "float16", 0.001, 5.0, None)
    assert not precision._explains(test, gold, gold, "float16", 0.001, 5.0, None)
    nan = np.array([np.nan, 0.0, 0.0])
    assert not precision._explains(nan, test, gold, "float16", 0.001, 5.0, None)
    assert precision._explains(nan, nan.copy(), gold, "float16", 0.001, 5.0, None)


@pytest.mark.spec("10.10", "10.7")
def test_comparison_reports_the_error_as_a_multiple_of_the_careful_reference():
    gold = np.zeros(3)
    result = compare(gold + 0.03, gold, dtype="float16", careful_err=0.01, k=5.0)
    assert result.metrics()["ref_multiple"] == pytest.approx(3.0)
    assert "ref_multiple" not in compare(gold, gold, dtype="float16", careful_err=0.0).metrics()
    assert "ref_multiple" not in compare(gold, gold).metrics()  # float64: no reference


# ------------------------------------------------------------------ no false findings


CORRECT = [
    ("reference", "layer_norm", "outlier_activations"),
    ("reference", "layer_norm[std_plus_eps]", "outlier_activations"),
    ("reference", "rms_norm", "outlier_activations"),
    ("reference", "scale_norm", "outlier_activations"),
    ("reference", "encoder_layer[pre_gelu]", "outlier_activations"),
    ("reference", "attention", "softmax_sum_beyond_float16"),
    ("reference", "mha", "softmax_exp_beyond_float16"),
    ("torch.nn", "layer_norm", "outlier_activations"),
    ("torch.nn", "encoder[norm_first]", "outlier_activations"),
    ("torch.nn", "attention", "softmax_exp_beyond_float16"),
    ("torch.nn", "mha", "softmax_sum_beyond_float16"),
]


@pytest.mark.spec("10.10", "10.7")
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize(("adapter", "name", "check"), CORRECT)
def test_correct_implementations_pass_the_half_precision_stress(adapter, name, check, dtype):
    implementation = load_adapter(adapter)
    tck = run_check(implementation, name, getattr(checks, f"test_{check}"), dtype)
    assert tck.record.calls and all(call["passed"] for call in tck.record.calls)
    assert not tck.record.conventions
