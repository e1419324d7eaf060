"""Hypotheses by class (conformance/diagnosis/hypotheses_solved.py): where RoPE is applied, and the
parameterised families solved numerically rather than drawn from a list (a positional base,
an eps, the attention scale), each named on one oracle comparison of its mutant and on
values of our own."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from support.oracle_failure import first_oracle_failure

from tck.adapters import load_adapter
from tck.conformance.diagnosis.alternatives import Alternative, output_of
from tck.conformance.diagnosis.explain import explain
from tck.conformance.diagnosis.hypotheses_solved import (
    _sdpa_scaled_by,
    rope_target_hypotheses,
)
from tck.conformance.toolkit.harness import Harness
from tck.reference import DECODER_CANONICAL
from tck.reference.inputs import Shape


@pytest.mark.parametrize(
    ("mutant", "code"),
    [
        ("rope_q_only", "rope.applied_to_wrong_tensors"),
        ("rope_on_values", "rope.applied_to_wrong_tensors"),
        ("causal_scale_d_model", "attention.scale_wrong"),
        ("rope_theta_hardcoded", "positional.base_wrong"),
        ("residual_from_normed_ffn", "blocks.residual_after_norm"),
        ("pe_float16_table", "numerics.table_low_precision"),
        ("layer_norm_seq_axes", "layer_norm.positions_interact"),
        ("rope_rotation_inverted", "rope.rotation_inverted"),
    ],
)
def test_classes_name_their_mutant(mutant: str, code: str) -> None:
    failure = first_oracle_failure(f"mutants.{mutant}")
    assert failure.code == code, failure.message


def _explained(component: str, alternative: Alternative, conventions=None, x_scale=1.0):  # type: ignore[no-untyped-def]
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == component)
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance()
    if conventions is not None:
        subject = dataclasses.replace(inst.subject, conventions=conventions)
        inst = dataclasses.replace(inst, subject=subject)
    inputs = tck.inputs(inst, Shape())
    inputs = {**inputs, "x": inputs["x"] * x_scale} if x_scale != 1.0 else inputs
    spec = tck.gold(inst, inputs)
    # The subject computes the alternative on every call (a solved value is checked on a
    # second call of the subject, explain.holds_on_second_call).
    tck.run = lambda inst, inputs: output_of(  # type: ignore[method-assign]
        component, inputs, inst.params, inst.config, inst.conventions, alternative
    )
    test = tck.run(inst, inputs)
    return explain(tck, inst, inputs, test, tck.compare(inst, test, spec)), inst


@pytest.mark.parametrize("component", ["rope", "seq2seq"])
@pytest.mark.parametrize("base", [2345.6, 7.7e6, 31.0])
def test_a_positional_base_off_any_list_is_solved(component: str, base: float) -> None:
    # seq2seq's record has no pe_base: its table is built inside (positional_base_hypotheses)
    (code, message), _ = _explained(component, Alternative("", "", conventions={"pe_base": base}))
    assert code == "positional.base_wrong", message
    solved = float(re.search(r"pe_base=([0-9.e+]+)", message).group(1))
    assert math.isclose(solved, base, rel_tol=1e-4)


@pytest.mark.parametrize("eps", [2.2e-4, 0.05])
def test_an_eps_off_any_list_is_solved(eps: float) -> None:
    (code, message), _ = _explained("rms_norm", Alternative("", "", conventions={"eps": eps}))
    assert code == "layer_norm.eps_wrong", message


@pytest.mark.parametrize("component", ["causal_self_attention", "decoder_block"])
@pytest.mark.parametrize("factor", [0.37, 2.5, "sqrt_dk", "dk"])
def test_the_attention_scale_is_solved_in_causal_components(component: str, factor) -> None:  # type: ignore[no-untyped-def]
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == component)
    config = Harness(adapter, subject, seed=0).instance().config
    d_k = config.d_model // config.n_heads
    value = {"sqrt_dk": math.sqrt(d_k), "dk": float(d_k)}.get(factor, factor)
    scaled = Alternative("", "", pieces={"scaled_dot_product_attention": _sdpa_scaled_by(value)})
    (code, message), _ = _explained(component, scaled)
    want = {"sqrt_dk": "attention.scale_missing", "dk": "attention.scale_inverted"}.get(
        factor, "attention.scale_wrong"
    )
    assert code == want, message


def test_rope_targets_only_where_the_component_rotates() -> None:
    rope = dataclasses.replace(DECODER_CANONICAL, positions="rope")
    assert len(list(rope_target_hypotheses("decoder_block", rope))) == 6  # 7 subsets - (q, k)
    assert not list(rope_target_hypotheses("decoder_block", DECODER_CANONICAL))  # learned
    assert not list(rope_target_hypotheses("mha", rope))


@pytest.mark.parametrize("targets", [("q",), ("k",), ("q", "k", "v"), ("q", "v"), ("v",)])
def test_rope_targets_are_named_in_a_block(targets: tuple[str, ...]) -> None:
    from tck.conformance.diagnosis.hypotheses_solved import _causal_self_attention_rotating

    rope = dataclasses.replace(DECODER_CANONICAL, positions="rope")
    moved = Alternative(
        "", "", pieces={"causal_self_attention": _causal_self_attention_rotating(targets)}
    )
    (code, message), _ = _explained("decoder_block", moved, rope)
    assert code == "rope.applied_to_wrong_tensors", message
    assert ("values" in message) == ("v" in targets)


def test_bfloat16_rounding_is_torchs() -> None:
    import numpy as np
    import torch

    from tck.conformance.diagnosis.hypotheses_solved import rounded_to

    x = np.random.default_rng(0).standard_normal(1000) * 10.0 ** np.arange(-5, 5).repeat(100)
    want = torch.from_numpy(x).to(torch.bfloat16).double().numpy()
    np.testing.assert_array_equal(rounded_to(x, "bfloat16"), want)
    np.testing.assert_array_equal(rounded_to(x, "float16"), x.astype(np.float16))


@pytest.mark.parametrize("component", ["sinusoidal_pe", "rope"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_table_kept_in_sixteen_bits_is_named(component: str, dtype: str) -> None:
    from tck.conformance.diagnosis.hypotheses_solved import table_dtype_hypotheses

    found = [
        a
        for a in table_dtype_hypotheses(component, "float64")
        if f"stored in {dtype} (" in a.message
    ]
    assert len(found) == 1
    (code, message), _ = _explained(component, found[0])
    assert code == "numerics.table_low_precision" and dtype in message, message
    # in a 16-bit comparison a 16-bit table is the dtype's own (RoPE's frequencies and
    # angles are formed in float32 whatever the dtype: those are offered there too)
    assert not [
        a
        for a in table_dtype_hypotheses(component, "bfloat16")
        if a.code == "numerics.table_low_precision"
    ]
    assert not list(table_dtype_hypotheses("layer_norm", "float64"))  # no table


@pytest.mark.parametrize("component", ["layer_norm", "rms_norm", "encoder_layer", "decoder_block"])
@pytest.mark.parametrize("which", [0, 1])  # (sequence, features), the sequence alone
def test_a_norm_over_the_sequence_too_is_named(component: str, which: int) -> None:
    from tck.conformance.diagnosis.hypotheses_solved import norm_axes_hypotheses

    piece = "rms_norm" if component == "rms_norm" else "layer_norm"  # the norm it runs
    ours = [a for a in norm_axes_hypotheses(component) if f"the {piece} " in a.message]
    assert len(ours) == 2
    (code, message), _ = _explained(component, ours[which])
    assert code == "layer_norm.positions_interact", message
    assert not list(norm_axes_hypotheses("mha"))


def test_an_rms_norm_over_the_positions_is_named() -> None:
    """RMSNorm's mean square taken over the positions (dim=1) of each feature, by hand."""

    def rms_norm(x, weight=None, *, eps=1e-5):  # type: ignore[no-untyped-def]
        x = np.asarray(x, dtype=np.float64)
        y = x / np.sqrt((x**2).mean(axis=1, keepdims=True) + eps)
        return y if weight is None else y * np.asarray(weight)

    (code, message), _ = _explained("rms_norm", Alternative("", "", pieces={"rms_norm": rms_norm}))
    assert code == "layer_norm.positions_interact", message
    assert "sequence axis" in message


@pytest.mark.parametrize(
    ("component", "eps"), [("layer_norm", 1e-5), ("rms_norm", 1e-6), ("layer_norm", 3e-7)]
)
def test_an_eps_held_in_float32_is_precision_not_a_wrong_eps(component: str, eps: float) -> None:
    """A float64 subject whose eps is the declared one rounded to float32 (an ONNX node's
    float attribute) loses precision; its eps is not wrong. The rows' variance is put below
    eps, where eps's last bits show."""
    conventions = dataclasses.replace(load_adapter("reference").subjects()[0].conventions, eps=eps)
    held = float(np.float32(eps))
    (code, message), _ = _explained(
        component,
        Alternative("", "", conventions={"eps": held}),
        conventions=conventions,
        x_scale=math.sqrt(eps) / 10,
    )
    assert code == "numerics.float64_precision_lost", message
    assert repr(held) in message


@pytest.mark.parametrize("component", ["attention", "causal_self_attention"])
def test_a_scale_held_in_float32_is_precision_not_a_wrong_scale(component: str) -> None:
    """1/sqrt(d_k) as a float32 constant (ORT's fused MatMul alpha) in a float64 subject."""
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == component)
    config = Harness(adapter, subject, seed=0).instance().config
    exact = 1.0 / math.sqrt(config.d_model // config.n_heads)
    factor = float(np.float32(exact)) / exact
    alternative = Alternative(
        "", "", pieces={"scaled_dot_product_attention": _sdpa_scaled_by(factor)}
    )
    (code, message), _ = _explained(component, alternative)
    assert code == "numerics.float64_precision_lost", message
    assert "attention scale" in message


def test_a_value_the_subject_follows_on_one_call_only_is_not_evidence() -> None:
    """A solved value is checked on a second, independent call: a subject that behaves as
    scale factor 0.37 on the failing input and as 2.5 on every other is not named
    attention.scale_wrong at 0.37 (one output is fitted by construction)."""
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == "causal_self_attention")
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance()
    inputs = tck.inputs(inst, Shape())

    def scaled(value: float) -> Alternative:
        return Alternative("", "", pieces={"scaled_dot_product_attention": _sdpa_scaled_by(value)})

    def run(inst, given):  # type: ignore[no-untyped-def]
        value = 0.37 if given is inputs else 2.5
        return output_of(
            "causal_self_attention",
            given,
            inst.params,
            inst.config,
            inst.conventions,
            scaled(value),
        )

    tck.run = run  # type: ignore[method-assign]
    test = tck.run(inst, inputs)
    code, message = explain(
        tck, inst, inputs, test, tck.compare(inst, test, tck.gold(inst, inputs))
    )
    assert code != "attention.scale_wrong", message
    assert "0.37" not in message


def test_the_second_call_draws_new_inputs_of_the_same_kind() -> None:
    from tck.conformance.diagnosis.explain import second_inputs

    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == "decoder_block")
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance()
    inputs = tck.inputs(inst, Shape())
    for made in (inputs, dict(inputs)):  # the harness's own draw, and inputs it did not make
        second = second_inputs(tck, inst, made)
        assert second is not None and set(second) == set(inputs)
        for name, value in inputs.items():
            assert second[name].shape == value.shape and second[name].dtype == value.dtype
            if np.issubdtype(value.dtype, np.floating):
                assert not np.allclose(second[name], value), name
            elif made is not inputs:  # redrawn by hand: masks, ids and positions kept
                assert np.array_equal(second[name], value), name


def _rope_by_hand(turn):  # type: ignore[no-untyped-def]
    """A RoPE written by hand whose pairs (a, b) at angle theta become ``turn(a, b, theta)``."""

    def rope(x, positions=None, *, base=10000.0, layout="interleaved", frequencies=None):  # type: ignore[no-untyped-def]
        x = np.asarray(x, dtype=np.float64)
        length, d = x.shape[-2], x.shape[-1]
        positions = np.arange(length) if positions is None else np.asarray(positions)
        omega = base ** (-np.arange(0, d, 2) / d) if frequencies is None else frequencies
        theta = positions[:, None] * omega
        first, second = (
            (slice(0, None, 2), slice(1, None, 2))
            if layout == "interleaved"
            else (slice(0, d // 2), slice(d // 2, None))
        )
        out = np.empty_like(x)
        out[..., first], out[..., second] = turn(x[..., first], x[..., second], theta)
        return out

    return rope


# the sign of sin flipped: pairs turned by -theta
_rope_sin_flipped = _rope_by_hand(
    lambda a, b, t: (a * np.cos(t) + b * np.sin(t), -a * np.sin(t) + b * np.cos(t))
)
# the packed table's halves read the wrong way round (``sin, cos = cos_sin.chunk(2)``):
# ``x * sin + rotate_half(x) * cos``, pairs turned by pi/2 - theta
_rope_cos_sin_exchanged = _rope_by_hand(
    lambda a, b, t: (a * np.sin(t) - b * np.cos(t), b * np.sin(t) + a * np.cos(t))
)


@pytest.mark.parametrize("component", ["rope", "causal_self_attention", "decoder_block"])
@pytest.mark.parametrize("layout", ["interleaved", "half_split"])
def test_a_rotation_turned_the_other_way_is_named(component: str, layout: str) -> None:
    rope = dataclasses.replace(DECODER_CANONICAL, positions="rope", rope_layout=layout)
    conventions = None if component == "rope" else rope
    turned = Alternative("", "", pieces={"rope": _rope_sin_flipped})
    if component == "rope":
        adapter = load_adapter("reference")
        subject = next(s for s in adapter.subjects() if s.component == "rope")
        declared = Harness(adapter, subject, seed=0).instance().conventions
        conventions = dataclasses.replace(declared, rope_layout=layout)
    (code, message), _ = _explained(component, turned, conventions)
    assert code == "rope.rotation_inverted", message


@pytest.mark.parametrize("layout", ["interleaved", "half_split"])
def test_cos_and_sin_exchanged_are_named_with_the_turn_they_cannot_be_told_from(
    layout: str,
) -> None:
    """A table read with cos and sin exchanged turns each pair by pi/2 - theta: q and k
    share the quarter turn, so every score, and the attention's output, is the inverted
    rotation's. The diagnosis names that code and says which other cause gives the same
    output, and how to tell them apart (SPEC.md §2.3, §2.4)."""
    rope = dataclasses.replace(DECODER_CANONICAL, positions="rope", rope_layout=layout)
    exchanged = Alternative("", "", pieces={"rope": _rope_cos_sin_exchanged})
    (code, message), _ = _explained("causal_self_attention", exchanged, rope)
    assert code == "rope.rotation_inverted", message
    assert "cos and sin are exchanged" in message and "RoPE(x, 0) = x" in message


@pytest.mark.parametrize("component", ["rope", "causal_self_attention"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_rope_frequencies_rounded_to_sixteen_bits_are_named(component: str, dtype: str) -> None:
    """inv_freq built in a 16-bit dtype, the angles then formed at full precision (written
    here with torch's own rounding of the frequencies)."""
    import torch

    from tck.reference import oracle

    def rope(x, positions=None, *, base=10000.0, layout="interleaved", frequencies=None):  # type: ignore[no-untyped-def]
        d = np.shape(x)[-1]
        inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=getattr(torch, dtype)) / d))
        omega = inv_freq.double().numpy()
        return oracle.rope(x, positions, base=base, layout=layout, frequencies=omega)

    rotating = dataclasses.replace(DECODER_CANONICAL, positions="rope")
    conventions = None if component == "rope" else rotating
    (code, message), _ = _explained(
        component, Alternative("", "", pieces={"rope": rope}), conventions
    )
    assert code == "numerics.rope_angles_low_precision", message


def test_a_constant_with_too_few_digits_is_a_wrong_value_not_float32() -> None:
    """A solved constant within float32's rounding of the declared one is the constant held
    in float32 only when it is a float32 number; a literal with too few digits (Megatron's
    0.79788456 for sqrt(2/pi)) is within the rounding but not on float32's grid."""
    from tck.conformance.diagnosis.hypotheses_solved import held_in_float32

    k = math.sqrt(2.0 / math.pi)
    assert held_in_float32(k, float(np.float32(k)))
    assert not held_in_float32(k, 0.79788456)
    assert not held_in_float32(k, 0.8)
    assert held_in_float32(0.044715, float(np.float32(0.044715)))
