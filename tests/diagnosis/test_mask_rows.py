"""§4.4 under a causal mask with left padding (conformance/checks/test_mask_rows.py): the
first queries of a left-padded row see no key, and their rows follow the declared policy
like an all-padding row's. A kernel that zeroes only an all-padding sequence passes
masks.fully_masked_rows and is named here."""

from __future__ import annotations

import dataclasses

import pytest

from tck.adapters import load_adapter
from tck.conformance.checks import test_mask_rows, test_masks
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure


def _harness(adapter: str, component: str) -> Harness:
    loaded = load_adapter(adapter)
    subject = next(s for s in loaded.subjects() if s.component == component)
    return Harness(loaded, subject, seed=0)


@pytest.mark.parametrize("component", test_mask_rows.causal_and_padded())
def test_the_reference_passes(component: str) -> None:
    test_mask_rows.test_fully_masked_rows_causal_left_padded(_harness("reference", component))


@pytest.mark.parametrize("component", ["attention", "mha", "encoder_layer"])
def test_nan_only_where_an_all_padding_sequence_is_zeroed(component: str) -> None:
    tck = _harness("mutants.causal_left_pad_nan", component)
    test_masks.test_fully_masked_rows(tck)  # the all-padding row is zeros, as declared
    with pytest.raises(CheckFailure) as failure:
        test_mask_rows.test_fully_masked_rows_causal_left_padded(tck)
    assert failure.value.code == "mask.fully_masked_rows_nan", failure.value


@pytest.mark.parametrize("component", ["encoder_layer", "decoder"])
def test_another_policy_is_named(component: str) -> None:
    """Empty rows that come out as the mean of the values where zeros are declared."""
    tck = _harness("reference", component)
    uniform = lambda inst, inputs: tck.gold(  # noqa: E731
        inst, inputs, dataclasses.replace(inst.conventions, fully_masked_rows="uniform")
    )
    tck.run = uniform  # type: ignore[method-assign]
    with pytest.raises(CheckFailure) as failure:
        test_mask_rows.test_fully_masked_rows_causal_left_padded(tck)
    assert failure.value.code == "mask.fully_masked_rows_uniform", failure.value
