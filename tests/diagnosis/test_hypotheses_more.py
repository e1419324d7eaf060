"""More explanations for an oracle mismatch (conformance/diagnosis/hypotheses_more.py): each
new hypothesis names its mutant's bug on one oracle comparison, and none of them is
degenerate (each changes the oracle's output, so it cannot explain a correct one)."""

from __future__ import annotations

import numpy as np
import pytest

from tck.adapters import load_adapter
from tck.conformance.diagnosis.alternatives import fits, output_of
from tck.conformance.diagnosis.hypotheses_more import more_hypotheses
from tck.conformance.toolkit.harness import DEFAULT_CONFIG, Harness
from tck.conformance.toolkit.results import CheckFailure
from tck.reference import DECODER_CANONICAL, Conventions, init_params
from tck.reference.expected import expected
from tck.reference.inputs import Shape, make_inputs


def first_oracle_failure(adapter: str) -> CheckFailure:
    subject = load_adapter(adapter).subjects()[0]
    tck = Harness(load_adapter(adapter), subject, seed=0)
    inst = tck.instance()
    inputs = tck.inputs(inst, Shape())
    with pytest.raises(CheckFailure) as failure:
        tck.assert_matches_oracle(inst, inputs)
    return failure.value


@pytest.mark.parametrize(
    ("mutant", "code"),
    [
        ("heads_split_no_transpose", "attention.heads_split_wrong_order"),
        ("gqa_split_no_transpose", "attention.heads_split_wrong_order"),
        ("qkv_bias_dropped", "params.bias_unused"),
        ("rms_norm_gain_plus_one", "layer_norm.gain_plus_one"),
        ("residual_from_normed", "blocks.residual_after_norm"),
        ("vit_merge_no_permute", "attention.heads_merged_wrong_order"),
    ],
)
def test_new_hypotheses_name_their_mutant(mutant: str, code: str) -> None:
    failure = first_oracle_failure(f"mutants.{mutant}")
    assert failure.code == code, failure.message
    assert "the spec's with" in failure.message  # plain words, then the numbers


@pytest.mark.parametrize(
    ("component", "conventions", "codes"),
    [
        (
            "mha",
            Conventions(),
            {
                "attention.heads_split_wrong_order",
                "attention.heads_merged_wrong_order",
                "params.bias_unused",
            },
        ),
        (
            "encoder_layer",
            Conventions(norm_placement="pre"),
            {
                "attention.heads_split_wrong_order",
                "blocks.residual_after_norm",
                "params.bias_unused",
                "layer_norm.gain_plus_one",
            },
        ),
        ("rms_norm", Conventions(norm_kind="rms_norm"), {"layer_norm.gain_plus_one"}),
        (
            "causal_self_attention",
            DECODER_CANONICAL,
            {"attention.heads_split_wrong_order", "params.bias_unused"},
        ),
    ],
)
def test_hypotheses_are_not_degenerate(
    component: str, conventions: Conventions, codes: set[str]
) -> None:
    """Every hypothesis expected for a component changes the oracle's output on the default
    inputs: it can explain a deviation, never the spec's own output (one offered that does
    not is never evidence: ``alternatives.fits``)."""
    config = DEFAULT_CONFIG
    params = init_params(component, config, conventions, seed=0)
    inputs = make_inputs(component, config, np.random.default_rng(0))

    base = expected(component, inputs, params, config, conventions)
    found = list(more_hypotheses(component, params))
    assert {alternative.code for alternative in found} >= codes
    for alternative in found:
        code, message = alternative.code, alternative.message
        gold = output_of(component, inputs, params, config, conventions, alternative)
        assert message and "." in code
        assert gold.shape == base.shape
        if code in codes:
            assert not np.allclose(gold, base, equal_nan=True), f"{code} changes nothing: {message}"
        else:  # offered from a static reading of the oracle call; then never evidence
            assert not np.allclose(gold, base, equal_nan=True) or not fits(
                gold, gold, base, None
            ), code


def test_a_hypothesis_never_changes_the_oracle_module() -> None:
    """The hypotheses are alternative oracles passed in: the spec's oracle module is the same
    object with the same functions before, during and after, and gives the spec's output."""
    from tck.reference import oracle

    before = dict(vars(oracle))
    config = DEFAULT_CONFIG
    params = init_params("encoder_layer", config, Conventions(norm_placement="pre"), seed=0)
    inputs = make_inputs("encoder_layer", config, np.random.default_rng(0))
    conventions = Conventions(norm_placement="pre")
    base = expected("encoder_layer", inputs, params, config, conventions)
    for alternative in more_hypotheses("encoder_layer", params, sublayers=2):
        output_of("encoder_layer", inputs, params, config, conventions, alternative)
    assert dict(vars(oracle)) == before
    np.testing.assert_array_equal(
        expected("encoder_layer", inputs, params, config, conventions), base
    )
