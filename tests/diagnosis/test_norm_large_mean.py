"""numerics.norm_large_mean and numerics.norm_variance_cancels: a LayerNorm whose variance is
formed in one pass, E[x^2] - E[x]^2, loses the rows whose mean is large against their spread
(SPEC.md §5.1, §10.10); correct two-pass or Welford statistics keep float32's own error
(conformance/checks/test_norm_precision.py, tck.conformance.diagnosis.precision)."""

from __future__ import annotations

import pytest

from tck.adapters import load_adapter
from tck.conformance.checks import test_norm_precision as check
from tck.conformance.checks import test_numerics as numerics
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure


def _harness(adapter: str, name: str) -> Harness:
    loaded = load_adapter(adapter)
    subject = next(s for s in loaded.subjects() if name in (s.name, s.component))
    return Harness(loaded, subject, seed=0)


@pytest.mark.parametrize("name", ["layer_norm", "encoder_layer"])
def test_a_one_pass_variance_is_named(name: str) -> None:
    tck = _harness("mutants.layer_norm_one_pass_variance", name)
    with pytest.raises(CheckFailure) as failure:
        check.test_norm_large_mean(tck)
    assert failure.value.code == "numerics.norm_variance_cancels", failure.value.message
    assert failure.value.metrics["mean_over_spread"] > 1e3


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_low_variance_rows_name_it_too(dtype: str) -> None:
    """Rows of mean 5 and spread down to 1e-3: the same finding, in float32 (where no
    quantity formed in the input dtype can account for it) and in float16."""
    tck = _harness("mutants.layer_norm_one_pass_variance", "layer_norm")
    with pytest.raises(CheckFailure) as failure:
        numerics.test_low_variance_rows(tck, dtype)
    assert failure.value.code == "numerics.norm_variance_cancels", failure.value.message


@pytest.mark.parametrize(
    ("adapter", "name"),
    [
        ("reference", "layer_norm"),
        ("reference", "encoder_layer[pre_gelu]"),
        ("torch.nn", "encoder[norm_first]"),
        ("torch.nn", "decoder_layer[norm_first]"),
        ("tck.adapters.mutants.tutorial:adapter", "layer_norm"),
    ],
)
def test_two_pass_statistics_pass(adapter: str, name: str) -> None:
    check.test_norm_large_mean(_harness(adapter, name))


@pytest.mark.parametrize("name", ["encoder_layer", "decoder_block[llama]"])
def test_post_ln_and_rms_norm_are_skipped(name: str) -> None:
    with pytest.raises(pytest.skip.Exception):
        check.test_norm_large_mean(_harness("reference", name))
