"""Padding by class: a key-padding mask read inverted, or laid over the queries instead of
the keys. In a causal subject the spec promises nothing at padded query rows (SPEC.md
§11.7), so every hypothesis is judged where the failed comparison judged (the padded rows
left out of both sides); a mask laid over the queries shows only under left padding, where
the pad rows, left without a key, tell it from a mask ignored."""

from __future__ import annotations

import numpy as np
import pytest

from tck.adapters import load_adapter
from tck.conformance.checks import test_decoder
from tck.conformance.diagnosis.alternatives import fits
from tck.conformance.diagnosis.explain import explain
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure
from tck.reference.inputs import Shape
from tck.reference.variants import expected_under, oracle_variant


def _harness(adapter: str, component: str) -> Harness:
    loaded = load_adapter(adapter)
    subject = next(s for s in loaded.subjects() if s.component == component)
    return Harness(loaded, subject, seed=0)


def _queries_mask(keep):  # type: ignore[no-untyped-def]
    return np.asarray(keep)[:, None, :, None]  # written here, not taken from the explainer


@pytest.mark.parametrize("component", ["encoder_layer", "mha"])
def test_padding_laid_over_the_queries_is_named(component: str) -> None:
    tck = _harness("reference", component)
    inst = tck.instance()
    variant = oracle_variant(
        {
            "key_padding": _queries_mask,
            "key_padding_mask": _queries_mask,
            "_expand_key_padding": _queries_mask,
        }
    )
    tck.run = lambda inst, given: expected_under(  # type: ignore[method-assign]
        variant, component, given, inst.params, inst.config, inst.conventions
    )
    inputs = tck.inputs(inst, Shape(batch=2, lq=6, lk=6, lengths=(6, 3)))
    test = tck.run(inst, inputs)
    code, message = explain(
        tck, inst, inputs, test, tck.compare(inst, test, tck.gold(inst, inputs))
    )
    assert code == "mask.applied_to_queries", message


def test_an_inverted_mask_is_named_on_a_causal_subject_whatever_its_pad_rows() -> None:
    """The pad rows of a causal subject are not promised: a subject that reads the mask
    inverted and does anything at its pad rows is still named ``mask.polarity_inverted``."""
    tck = _harness("reference", "causal_self_attention")
    inst = tck.instance()
    inputs = tck.inputs(inst, Shape(batch=2, lq=9, lk=9, lengths=(9, 5)))
    keep = np.asarray(inputs["key_padding"])
    inverted = {**inputs, "key_padding": ~keep}
    test = tck.gold(inst, inverted).copy()
    test[~keep] = 7.0  # the pad rows: anything
    tck.run = lambda inst, given: test  # type: ignore[method-assign]
    code, message = explain(
        tck, inst, inputs, test, tck.compare(inst, test, tck.gold(inst, inputs), inputs=inputs)
    )
    assert code == "mask.polarity_inverted", message


def test_an_inverted_mask_is_named_whatever_the_rows_it_empties_output() -> None:
    """A module that zeroes the rows left without a key after its output projection (where
    the oracle zeroes the attention's row, §4.4), reading the padding mask inverted: the real
    rows the inversion empties are not judged, the rows that still see keys name it."""
    tck = _harness("reference", "causal_self_attention")
    inst = tck.instance()
    inputs = tck.inputs(inst, Shape(batch=2, lq=9, lk=9, lengths=(9, 5)))
    keep = np.asarray(inputs["key_padding"]).copy()
    keep[0, :3] = False  # row 0 left-padded: its real rows still see keys once inverted
    inputs["key_padding"] = keep
    test = tck.gold(inst, {**inputs, "key_padding": ~keep}).copy()
    keyless = ~np.cumsum(~keep, axis=1).astype(bool)  # no earlier-or-own pad to attend
    assert keyless[1, :5].all() and not keyless[0].any()
    test[keyless] = 0.0
    tck.run = lambda inst, given: test  # type: ignore[method-assign]
    code, message = explain(
        tck, inst, inputs, test, tck.compare(inst, test, tck.gold(inst, inputs), inputs=inputs)
    )
    assert code == "mask.polarity_inverted", message


def test_a_hypothesis_that_differs_only_where_nothing_is_promised_is_no_evidence() -> None:
    spec = np.zeros((1, 3, 2))
    gold = spec.copy()
    gold[0, 2] = 1.0  # differs at row 2 only
    unpromised = np.zeros_like(spec, bool)
    unpromised[0, 2] = True
    assert fits(gold, gold, spec, None)
    assert not fits(gold, gold, spec, None, unpromised=unpromised)


def test_left_padding_tells_the_mask_over_the_queries_from_a_mask_ignored() -> None:
    tck = _harness("mutants.causal_padding_on_queries", "causal_self_attention")
    with pytest.raises(CheckFailure) as failure:
        test_decoder.test_left_padding(tck)
    assert failure.value.code == "mask.applied_to_queries", failure.value.message


def test_the_causal_inverted_mutant_is_named_on_right_padded_rows() -> None:
    tck = _harness("mutants.causal_padding_polarity", "causal_self_attention")
    inst = tck.instance()
    inputs = tck.inputs(inst, Shape(batch=2, lq=13, lk=13, lengths=(13, 7)), seed=199)
    with pytest.raises(CheckFailure) as failure:
        tck.assert_matches_oracle(inst, inputs)
    assert failure.value.code == "mask.polarity_inverted", failure.value.message
