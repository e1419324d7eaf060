"""Alternative oracles (conformance/diagnosis/alternatives.py, reference/variants.py): a
hypothesis is
passed to the comparison, never patched into the oracle module, and is evidence only where
the input can tell it from the spec (SPEC.md §0.3)."""

from __future__ import annotations

import threading

import numpy as np

from tck.adapters import load_adapter
from tck.conformance.diagnosis.alternatives import Alternative, fits, output_of
from tck.conformance.diagnosis.explain import explain
from tck.conformance.diagnosis.hypotheses_more import head_split_hypotheses
from tck.conformance.toolkit.harness import DEFAULT_CONFIG, Harness
from tck.reference import Conventions, init_params, oracle
from tck.reference.expected import expected
from tck.reference.inputs import Shape, make_inputs
from tck.reference.variants import oracle_pieces, oracle_variant, reaches


def test_the_pieces_a_component_runs_come_from_its_oracle_call() -> None:
    assert reaches("vit", "patch_embed") and reaches("vit", "split_heads")
    assert reaches("decoder_block", "rope") and reaches("encoder", "_sublayer")
    assert not reaches("layer_norm", "scaled_dot_product_attention")
    assert not reaches("patch_embed", "split_heads")
    assert "rms_norm" in oracle_pieces("rms_norm")


def test_a_variant_is_a_separate_oracle() -> None:
    """Replacing a piece in a variant changes what every function of the variant calls and
    nothing in the oracle module, also while another thread computes the spec's output."""
    calls = []

    def split_heads(x, n_heads):  # type: ignore[no-untyped-def]
        calls.append(n_heads)
        return oracle.split_heads(x, n_heads)

    variant = oracle_variant({"split_heads": split_heads})
    assert variant.split_heads is split_heads and oracle.split_heads is not split_heads
    params = init_params("mha", DEFAULT_CONFIG, Conventions(), seed=0)
    inputs = make_inputs("mha", DEFAULT_CONFIG, np.random.default_rng(0))
    base = expected("mha", inputs, params, DEFAULT_CONFIG, Conventions())
    seen: list[np.ndarray] = []
    other = threading.Thread(
        target=lambda: seen.append(expected("mha", inputs, params, DEFAULT_CONFIG, Conventions()))
    )
    other.start()
    alternative = Alternative("x", "x", {"split_heads": split_heads})
    same = output_of("mha", inputs, params, DEFAULT_CONFIG, Conventions(), alternative)
    other.join()
    assert calls == [DEFAULT_CONFIG.n_heads] * 3  # q, k and v, through the variant only
    np.testing.assert_array_equal(same, base)
    np.testing.assert_array_equal(seen[0], base)


def test_an_alternative_equal_to_the_spec_is_never_evidence() -> None:
    """On a one-token call, heads split without the transpose ARE the spec: that hypothesis
    reproduces any output near the spec's, and must not be recorded."""
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == "mha")
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance()
    inputs = tck.inputs(inst, Shape(batch=2, lq=1, lk=1))
    spec = tck.gold(inst, inputs)
    (split,) = head_split_hypotheses("mha")  # the view without the transpose
    gold = output_of("mha", inputs, inst.params, inst.config, inst.conventions, split)
    np.testing.assert_allclose(gold, spec, rtol=1e-13)  # the input cannot tell them apart
    test = spec * (1 + 1e-7)  # a float32-sized error, wrong for float64
    assert not fits(test, gold, spec, None)
    code, _ = explain(tck, inst, inputs, test, tck.compare(inst, test, spec))
    assert code != "attention.heads_split_wrong_order"
    assert "reproduced_by" not in tck.record.metrics or (
        tck.record.metrics["reproduced_by"] != "attention.heads_split_wrong_order"
    )
    # on a longer call the same hypothesis is told apart, and reproduces its own output
    longer = tck.inputs(inst, Shape(batch=2, lq=5, lk=5))
    spec5 = tck.gold(inst, longer)
    gold5 = output_of("mha", longer, inst.params, inst.config, inst.conventions, split)
    assert fits(gold5, gold5, spec5, None)


def test_a_failure_at_a_padded_position_says_so() -> None:
    """NaN at padded query rows is located: the message says the worst index is padding and
    counts the non-finite positions that are padded and real."""
    from tck.conformance.diagnosis.explain import padded_positions
    from tck.reference.tolerance import compare

    keep = np.array([[True, True, False], [True, True, True]])
    gold = np.zeros((2, 3, 4))
    test = gold.copy()
    test[0, 2] = np.nan  # the padded query row of the first sequence
    result = compare(test, gold)
    words = padded_positions({"key_padding": keep}, test, result, causal=True)
    assert "non-finite at 1 padded and 0 real position(s)" in words
    assert "(0, 2, 0) is a padded position" in words, words
    assert "§11.7" in words  # a decoder's padded rows are not promised
    # an encoder's are (by the formula, or zero where declared): no "look elsewhere"
    encoder = padded_positions({"key_padding": keep}, test, result, causal=False)
    assert "§4.2" in encoder and "§11.7" not in encoder, encoder
    test[1, 0, 1] = np.nan
    assert "1 padded and 1 real" in padded_positions(
        {"key_padding": keep}, test, compare(test, gold), causal=True
    )
    assert padded_positions({}, test, result, causal=True) == ""
    no_pads = {"key_padding": np.ones((2, 3), bool)}
    assert padded_positions(no_pads, test, result, causal=True) == ""
