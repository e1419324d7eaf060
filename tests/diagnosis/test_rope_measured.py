"""RoPE as a measured family: frequency tables off any list solved for pair by pair, and a
cos/sin table laid out for the other pairing (tck.conformance.diagnosis.rope_measured)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tck.adapters import load_adapter
from tck.conformance.diagnosis.alternatives import Alternative, output_of
from tck.conformance.diagnosis.explain import explain
from tck.conformance.diagnosis.rope_measured import (
    _rope_table_for,
    _rope_with,
    describe_frequencies,
)
from tck.conformance.toolkit.harness import Harness
from tck.reference import oracle
from tck.reference.inputs import Shape


def _explained(component: str, make, **declared):  # type: ignore[no-untyped-def]
    """explain() on a subject that computes the oracle with ``make(d, conventions)`` as its
    RoPE piece, under the reference's conventions changed by ``declared``."""
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == component)
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance()
    conventions = dataclasses.replace(inst.conventions, positions="rope", **declared)
    inst = dataclasses.replace(
        inst, subject=dataclasses.replace(inst.subject, conventions=conventions)
    )
    d = inst.config.d_model // inst.config.n_heads if component != "rope" else None
    inputs = tck.inputs(inst, Shape(lq=9, lk=9))
    if d is None:
        d = np.shape(inputs["x"])[-1]
    bug = Alternative("", "", pieces={"rope": make(d, conventions)})
    tck.run = lambda inst, inputs: output_of(  # type: ignore[method-assign]
        component, inputs, inst.params, inst.config, inst.conventions, bug
    )
    test = tck.run(inst, inputs)
    spec = tck.gold(inst, inputs)
    return explain(tck, inst, inputs, test, tck.compare(inst, test, spec))


def _llama3_multiplied(d: int, conv) -> object:  # type: ignore[no-untyped-def]
    """Llama 3.1's rule with the long wavelengths multiplied by the factor, not divided."""
    unscaled = oracle.rope_frequencies(d, base=conv.pe_base)
    declared = oracle.rope_frequencies_of(d, conv)
    factor = conv.rope_scaling_factor
    wrong = np.where(np.isclose(declared, unscaled / factor), unscaled * factor, declared)
    return _rope_with(wrong, conv.rope_layout)


LLAMA3 = {
    "rope_scaling": "llama3",
    "rope_scaling_factor": 8.0,
    "rope_original_max_positions": 16,
    "pe_base": 10000.0,
}


@pytest.mark.parametrize("component", ["rope", "causal_self_attention", "decoder_block"])
def test_a_scaling_multiplied_instead_of_divided_is_solved(component: str) -> None:
    code, message = _explained(component, _llama3_multiplied, **LLAMA3)
    assert code == "positional.frequency_wrong", message
    assert "64 x the declared" in message, message


def test_frequencies_off_any_family_are_solved_in_a_block() -> None:
    def jittered(d, conv):  # type: ignore[no-untyped-def]
        table = oracle.rope_frequencies_of(d, conv).copy()
        table[1] *= 0.37  # one pair's frequency, nothing geometric about it
        return _rope_with(table, conv.rope_layout)

    code, message = _explained("decoder_block", jittered)
    assert code == "positional.frequency_wrong", message
    assert "pair 1:" in message


@pytest.mark.parametrize("declared", ["half_split", "interleaved"])
def test_a_table_laid_out_for_the_other_pairing_is_named(declared: str) -> None:
    other = "interleaved" if declared == "half_split" else "half_split"
    code, message = _explained(
        "causal_self_attention",
        lambda d, conv: _rope_table_for(other, other, declared),
        rope_layout=declared,
    )
    assert code == "rope.table_layout_mismatch", message


@pytest.mark.parametrize("declared", ["half_split", "interleaved"])
@pytest.mark.parametrize("sin_other", [True, False])
def test_cos_and_sin_tables_in_two_layouts_are_named(declared: str, sin_other: bool) -> None:
    """GPT-J's duplicate_interleave on one of the two tables, cat((t, t)) on the other."""
    other = "interleaved" if declared == "half_split" else "half_split"
    cos, sin = (declared, other) if sin_other else (other, declared)
    code, message = _explained(
        "causal_self_attention",
        lambda d, conv: _rope_table_for(cos, sin, declared),
        rope_layout=declared,
    )
    assert code == "rope.table_layout_mismatch", message
    assert "cos table" in message and "sin table" in message, message


def test_the_fitted_table_is_classified() -> None:
    unscaled = oracle.rope_frequencies(8, base=10000.0)
    code, _ = describe_frequencies(unscaled / 4, unscaled, unscaled)
    assert code == "rope.scaling_linear"
    code, message = describe_frequencies(oracle.rope_frequencies(8, base=500.0), unscaled, unscaled)
    assert code == "positional.base_wrong" and "500" in message
    declared = unscaled / 8
    code, _ = describe_frequencies(unscaled, declared, unscaled)
    assert code == "rope.scaling_none"


def _scale_probe(mutant: str) -> None:
    from tck.conformance.checks import test_decoder as checks

    adapter = load_adapter(f"mutants.{mutant}")
    subject = next(s for s in adapter.subjects() if s.component == "causal_self_attention")
    checks.test_effective_scale(Harness(adapter, subject, seed=0))


@pytest.mark.parametrize("mutant", ["rope_scaling_multiplied", "rope_table_interleaved"])
def test_the_scale_probe_reads_no_rope_bug_as_a_scale(mutant: str) -> None:
    with pytest.raises(pytest.skip.Exception, match="rotates otherwise than declared"):
        _scale_probe(mutant)


def test_the_scale_probe_still_reads_a_scale_bug_under_rope() -> None:
    from tck.conformance.toolkit.results import CheckFailure

    with pytest.raises(CheckFailure) as failure:
        _scale_probe("causal_scale_d_model")
    assert failure.value.code == "attention.scale_wrong"


def test_a_table_fitted_to_zero_is_no_scaling() -> None:
    """Frequencies fitted to 0 (no rotation: a 16-bit output the fit reads as unrotated)
    are not 'every frequency times 0', a linear scaling by 1/0."""
    from tck.conformance.diagnosis.rope_measured import describe_frequencies

    declared = np.array([1.0, 0.0464, 0.00215])
    code, words = describe_frequencies(np.zeros(3), declared, declared)
    assert code == "positional.frequency_wrong", (code, words)
