"""Hypotheses by class for pieces whole models hold (conformance/diagnosis/hypotheses_fitted.py):
the positional base and the frequency exponent solved inside any component with a table or
RoPE, the table's functions, FFN activations solved among parameterised families and their
place, the patch kernel transposed, the class token appended, one parameter read from a
sibling. Each is named on one oracle comparison of its mutant, and on cases of our own in
components other than the mutant's."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from support.oracle_failure import first_oracle_failure
from test_hypotheses_solved import _explained

from tck.adapters import load_adapter
from tck.conformance.diagnosis import hypotheses_fitted as fitted
from tck.conformance.diagnosis.alternatives import Alternative
from tck.conformance.toolkit.harness import Harness
from tck.reference import DECODER_CANONICAL


@pytest.mark.parametrize(
    ("mutant", "code"),
    [
        ("seq2seq_pe_linspace_exponent", "positional.frequency_wrong"),
        ("seq2seq_pe_cos_sin_swapped", "positional.sin_cos_swapped"),
        ("pe_cos_on_both", "positional.pair_function_repeated"),
        ("rope_exponent_doubled", "positional.frequency_wrong"),
        ("ffn_squared_relu", "ffn.activation_wrong"),
        ("swiglu_gate_quick_gelu", "ffn.activation_wrong"),
        ("lm_mlp_gelu_after_proj", "ffn.activation_misplaced"),
        ("vit_patch_kernel_transposed", "vit.patch_kernel_transposed"),
        ("vit_cls_appended", "vit.pooling_wrong_token"),
        ("mha_value_bias_from_query", "params.read_from_other_module"),
    ],
)
def test_classes_name_their_mutant(mutant: str, code: str) -> None:
    failure = first_oracle_failure(f"mutants.{mutant}")
    assert failure.code == code, failure.message


def _params(component: str):  # type: ignore[no-untyped-def]
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == component)
    return Harness(adapter, subject, seed=0).instance().params


@pytest.mark.parametrize("base", [1000.0, 3.3e5])
def test_a_sinusoidal_base_is_solved_inside_an_encoder_decoder(base: float) -> None:
    (code, message), _ = _explained("seq2seq", Alternative("", "", conventions={"pe_base": base}))
    assert code == "positional.base_wrong", message
    solved = float(re.search(r"pe_base=([0-9.e+]+)", message).group(1))
    assert math.isclose(solved, base, rel_tol=1e-4)


@pytest.mark.parametrize(("k", "words"), [(0.5, "i/d"), (2.0, "4i/d")])
def test_an_exponent_stepped_wrong_is_not_another_base(k: float, words: str) -> None:
    rope = dataclasses.replace(DECODER_CANONICAL, positions="rope")
    stepped = Alternative("", "", conventions={"pe_base": 10000.0**k})
    (code, message), _ = _explained("decoder_block", stepped, rope)
    assert code == "positional.frequency_wrong", message
    assert f"base^(-{words})" in message


def test_exponent_factor_names_only_square_and_root() -> None:
    assert fitted.exponent_factor(1e4, 100.0) == 0.5
    assert fitted.exponent_factor(1e4, 1e8) == 2.0
    assert fitted.exponent_factor(1e4, 1e6) is None  # Qwen2's base is a base
    assert fitted.exponent_factor(1e4, 1e3) is None


def test_a_lower_dtype_fit_carries_its_rounding_into_the_exponent() -> None:
    """A base 100 solved under a float32 bound at long positions comes out 100.005: the
    exponent step i/d, read with the lower dtype's tolerance, not another base."""
    assert fitted.exponent_factor(1e4, 100.005) is None
    assert fitted.exponent_factor(1e4, 100.005, rtol=fitted.LOWER_EXPONENT_RTOL) == 0.5
    named = fitted.base_alternative("pe_base", 1e4, 100.005, width=8, compared_in="float32")
    assert named.code == "positional.frequency_wrong", named.message


@pytest.mark.parametrize(
    ("compared_in", "code"),
    [
        ("float64", "numerics.float64_precision_lost"),
        ("float32", "numerics.rope_angles_low_precision"),
    ],
)
def test_a_base_solved_near_the_declared_one_is_precision(compared_in: str, code: str) -> None:
    """RoPE angles formed in float32 in a float64 build: on inputs scaled up, a base 1e-5 off
    the declared one comes as close as the float32 angles do. No model is given such a base;
    the fit names the precision. A base a model is given stays a base."""
    near = fitted.base_alternative("pe_base", 10000.0, 10000.1, compared_in=compared_in)
    assert near.code == code, near.message
    assert "no base a model is given" in near.message
    assert fitted.base_alternative("pe_base", 10000.0, 500000.0).code == "positional.base_wrong"
    # a catalogue value (not solved for) is named as it is
    listed = fitted.base_alternative("pe_base", 10000.0, 10000.1, solved=False)
    assert listed.code == "positional.base_wrong"


@pytest.mark.parametrize("d", [8, 16, 64, 768])
def test_exponents_spaced_over_half_d_minus_one_are_named_with_the_width(d: int) -> None:
    # tensor2tensor / flax: log(base) / (d/2 - 1), i.e. the base to the power d / (d - 2)
    spaced = 1e4 ** (d / (d - 2))
    assert fitted.exponent_factor(1e4, spaced, d) == pytest.approx(d / (d - 2))
    assert fitted.exponent_factor(1e4, spaced) is None  # without d: a base among others
    if d <= 64:  # k = d / (d - 2) of neighbouring widths within EXPONENT_RTOL above
        assert fitted.exponent_factor(1e4, spaced, d + 2) is None
    # a power of ten is d / (d - 2) of another for some d (1e5 of 1e4 at d = 10): a round
    # base is read as a base typed in, whatever the width
    assert fitted.exponent_factor(1e4, 1e5, 10) is None
    assert fitted.exponent_factor(1e4, 1e6, 6) is None


@pytest.mark.parametrize("component", ["sinusoidal_pe", "seq2seq", "rope", "decoder_block"])
def test_a_table_spaced_over_half_d_minus_one_is_a_frequency_bug(component: str) -> None:
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == component)
    d = fitted.table_width(component, Harness(adapter, subject, seed=0).instance().config)
    assert d is not None and d > 4
    declared = subject.conventions
    if component == "decoder_block":
        declared = dataclasses.replace(DECODER_CANONICAL, positions="rope")
    # Llama 3's base: at the rotary subjects' head width 6 a base of 1e4 spaced this way is
    # 1e6, a round base (another base typed in, exponent_factor)
    declared = dataclasses.replace(declared, pe_base=5e5)
    spaced = Alternative("", "", conventions={"pe_base": 5e5 ** (d / (d - 2))})
    (code, message), _ = _explained(component, spaced, declared)
    assert code == "positional.frequency_wrong", message
    assert "d/2 - 1" in message


@pytest.mark.parametrize(
    ("even", "odd", "code"),
    [
        ("sin", "sin", "positional.pair_function_repeated"),
        ("cos", "cos", "positional.pair_function_repeated"),
    ],
)
def test_the_table_functions_are_named_in_a_whole_model(even: str, odd: str, code: str) -> None:
    table = Alternative("", "", pieces={"sinusoidal_pe": fitted._sinusoidal_pe_with(even, odd)})
    (found, message), _ = _explained("seq2seq", table)
    assert found == code, message


@pytest.mark.parametrize(
    ("component", "family", "value", "named"),
    [
        ("encoder_layer", fitted._sigmoid_scaled, 1.702, "QuickGELU"),
        ("encoder_layer", fitted._gelu_tanh_with, 0.3, "cubic coefficient 0.3"),
        ("decoder_layer", fitted._relu_power, 1.5, "max(x, 0)^1.5"),
        ("vit", fitted._sigmoid_scaled, 1.0, "SiLU"),
        ("vit", fitted._gelu_erf_scaled, 0.5, "erf(x / 2)"),
        ("encoder_layer", fitted._gelu_erf_scaled, 1.0, "erf(x)"),
    ],
)
def test_an_activation_off_the_catalogue_is_fitted(component, family, value, named) -> None:  # type: ignore[no-untyped-def]
    act = Alternative("", "", pieces={"feed_forward": fitted._plain_ffn_with(family(value))})
    (code, message), _ = _explained(component, act)
    assert code == "ffn.activation_wrong", message
    assert named in message


@pytest.mark.parametrize("component", ["ffn", "encoder", "seq2seq"])
def test_an_activation_after_the_output_projection_is_named(component: str) -> None:
    moved = Alternative("", "", pieces={"feed_forward": fitted._activated_after_output})
    (code, message), _ = _explained(component, moved)
    assert code == "ffn.activation_misplaced", message


def test_the_patch_kernel_transposed_and_the_class_token_appended() -> None:
    params = _params("vit")
    (code, message), _ = _explained("vit", next(fitted.patch_kernel_hypotheses(params)))
    assert code == "vit.patch_kernel_transposed", message
    (code, message), _ = _explained("vit", next(fitted.class_token_hypotheses("vit")))
    assert code == "vit.pooling_wrong_token", message


@pytest.mark.parametrize(
    ("component", "reader", "source"), [("encoder_layer", "q", "k"), ("mha", "o", "v")]
)
def test_one_bias_read_from_a_sibling(component: str, reader: str, source: str) -> None:
    params = dict(_params(component))
    for key in [k for k in params if k.endswith(f"{reader}.bias")]:
        params[key] = params[key.replace(f"{reader}.bias", f"{source}.bias")]
    (code, message), _ = _explained(component, Alternative("", "", params=params))
    assert code == "params.read_from_other_module", message
    assert f"bias of {reader!r}" in message and repr(source) in message


def test_no_hypothesis_here_equals_the_spec() -> None:
    """Every hypothesis differs from the spec on a component that holds its piece (a
    hypothesis equal to the spec could never be evidence; this guards the pieces' wiring)."""
    from tck.conformance.diagnosis.alternatives import output_of

    for component, alternatives in (
        ("seq2seq", list(fitted.pe_function_hypotheses("seq2seq"))),
        ("encoder_layer", list(fitted.activation_place_hypotheses("encoder_layer"))),
        (
            "vit",
            [
                *fitted.class_token_hypotheses("vit"),
                *fitted.patch_kernel_hypotheses(_params("vit")),
            ],
        ),
    ):
        adapter = load_adapter("reference")
        subject = next(s for s in adapter.subjects() if s.component == component)
        tck = Harness(adapter, subject, seed=0)
        inst = tck.instance()
        from tck.reference.inputs import Shape

        inputs = tck.inputs(inst, Shape())
        spec = tck.gold(inst, inputs)
        assert alternatives
        for alternative in alternatives:
            out = output_of(
                component, inputs, inst.params, inst.config, inst.conventions, alternative
            )
            assert not np.allclose(out, spec), alternative.code
    assert not list(fitted.pe_function_hypotheses("causal_self_attention"))
    assert not list(fitted.class_token_hypotheses("encoder_layer"))


def test_a_view_that_raises_is_named_by_what_it_would_compute() -> None:
    """shapes.view_errors: a head split by a view that raises on the batched calls (a
    time-first projection is not contiguous) is named by its layout; a subject whose calls
    run is left to the oracle checks."""
    from tck.conformance.checks import test_view_errors as check
    from tck.conformance.toolkit.results import CheckFailure

    adapter = load_adapter("mutants.mha_time_first_view_heads")
    tck = Harness(adapter, adapter.subjects()[0], seed=0)
    with pytest.raises(CheckFailure) as failure:
        check.test_view_errors(tck)
    assert failure.value.code == "attention.heads_split_wrong_order", failure.value.message
    assert "viewed as" in failure.value.message
    reference = load_adapter("reference")
    subject = next(s for s in reference.subjects() if s.component == "mha")
    with pytest.raises(pytest.skip.Exception):
        check.test_view_errors(Harness(reference, subject, seed=0))


@pytest.mark.parametrize("stored", ["group_major", "part_major"])
def test_a_grouped_fused_qkv_read_in_the_other_layout(stored: str) -> None:
    """attention.qkv_order_wrong for grouped-query attention: the fused projection stored
    group-major and read part-major (Qwen's grouped query_key_value viewed as [q | k | v]),
    or the reverse."""
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.name == "causal_lm[llama]")
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance(tck.config(n_kv_heads=2))
    params = dict(inst.params)
    n_heads = inst.config.n_heads
    prefixes = sorted({k[: -len("q.weight")] for k in params if k.endswith("q.weight")})
    d = params[f"{prefixes[0]}q.weight"].shape[0] // n_heads
    n_kv = params[f"{prefixes[0]}k.weight"].shape[0] // d
    assert n_kv < n_heads  # grouped
    for prefix in prefixes:
        for leaf in ("weight", "bias"):
            keys = [f"{prefix}{x}.{leaf}" for x in "qkv"]
            if all(k in params for k in keys):
                relaid = fitted._grouped_relaid(*(params[k] for k in keys), n_kv, stored)
                params.update(zip(keys, relaid, strict=True))
    from tck.conformance.diagnosis.alternatives import output_of
    from tck.conformance.diagnosis.explain import explain
    from tck.reference.inputs import Shape

    inputs = tck.inputs(inst, Shape())
    alternative = Alternative("", "", params=params)
    tck.run = lambda inst, inputs: output_of(  # type: ignore[method-assign]
        "causal_lm", inputs, inst.params, inst.config, inst.conventions, alternative
    )
    test = tck.run(inst, inputs)
    code, message = explain(
        tck, inst, inputs, test, tck.compare(inst, test, tck.gold(inst, inputs))
    )
    assert code == "attention.qkv_order_wrong", message
    assert "grouped-query" in message
