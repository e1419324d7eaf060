"""numerics.softmax_long_rows: a 16-bit running sum over the keys is named, an eager float32
softmax is not (conformance/checks/test_softmax_precision.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tck.adapters import load_adapter
from tck.conformance.checks import test_softmax_precision as check
from tck.conformance.checks.test_softmax_precision import K_MEAN, LONG_ROW, long_rows, mean_errors
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure


def _harness(adapter: str, name: str) -> Harness:
    loaded = load_adapter(adapter)
    subject = next(s for s in loaded.subjects() if s.name == name)
    return Harness(loaded, subject, seed=0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_an_online_softmax_kept_in_sixteen_bits_is_named(dtype: str) -> None:
    with pytest.raises(CheckFailure) as failure:
        check.test_softmax_long_rows(
            _harness("mutants.softmax_online_half", "causal_self_attention"), dtype
        )
    assert failure.value.code == "numerics.softmax_low_precision"
    assert (
        failure.value.metrics["short_ratio"] <= K_MEAN < failure.value.metrics["mean_error_ratio"]
    )


@pytest.mark.parametrize("name", ["causal_self_attention[eager]", "decoder_block[sdpa]"])
def test_transformers_float32_softmax_passes(name: str) -> None:
    """Runs in tox -e hf (transformers installed); skipped where it is missing."""
    pytest.importorskip("transformers")
    tck = _harness("hf.gpt2", name)
    check.test_softmax_long_rows(tck, "float16")
    assert tck.record.metrics["mean_error_ratio"] <= 1.5


def test_the_long_rows_are_near_equal_tokens() -> None:
    tck = _harness("reference", "causal_lm")
    inst = tck.instance(tck.config(max_len=LONG_ROW), dtype="float16")
    ids = long_rows(tck, inst, LONG_ROW)["ids"]
    assert ids.shape == (1, LONG_ROW) and len(np.unique(ids)) == 1
    error, careful_error = mean_errors(tck, inst, long_rows(tck, inst, 64))
    assert error == careful_error  # the reference is the careful run
