"""More explanations for an oracle mismatch (conformance/diagnosis/hypotheses_more.py): each
new hypothesis names its mutant's bug on one oracle comparison, and none of them is
degenerate (each changes the oracle's output, so it cannot explain a correct one)."""

from __future__ import annotations

import numpy as np
import pytest
from support.oracle_failure import first_oracle_failure

from tck.adapters import load_adapter
from tck.conformance.diagnosis.alternatives import Alternative, fits, output_of
from tck.conformance.diagnosis.hypotheses_more import more_hypotheses
from tck.conformance.toolkit.harness import DEFAULT_CONFIG, Harness
from tck.reference import DECODER_CANONICAL, Conventions, init_params
from tck.reference.expected import expected
from tck.reference.inputs import Shape, make_inputs


@pytest.mark.parametrize(
    ("mutant", "code"),
    [
        ("heads_split_no_transpose", "attention.heads_split_wrong_order"),
        ("gqa_split_no_transpose", "attention.heads_split_wrong_order"),
        ("qkv_bias_dropped", "params.bias_unused"),
        ("rms_norm_gain_plus_one", "layer_norm.gain_plus_one"),
        ("residual_from_normed", "blocks.residual_after_norm"),
        ("vit_merge_no_permute", "attention.heads_merged_wrong_order"),
        ("qkv_split_k_v_swapped", "attention.qkv_order_wrong"),
        ("rms_norm_gain_unused", "layer_norm.gain_unused"),
        ("lm_layers_share_weights", "blocks.layer_params_wrong"),
        ("swiglu_silu_after_product", "ffn.activation_after_gating"),
        ("lm_log_softmax_logits", "model.returns_log_probabilities"),
        ("scale_norm_gain_unused", "layer_norm.gain_unused"),
        ("encoder_norm_keys_values_bypassed", "blocks.norm_bypassed"),
        ("encoder_ffn_reads_layer_input", "blocks.branch_from_layer_input"),
        ("seq2seq_encoder_final_norm_missing", "blocks.final_norm_missing"),
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
                "blocks.norm_bypassed",
                "blocks.branch_from_layer_input",
                "blocks.residual_after_norm",
                "params.bias_unused",
                "layer_norm.gain_plus_one",
            },
        ),
        (
            "decoder_layer",
            Conventions(norm_placement="pre"),
            {"blocks.norm_bypassed", "blocks.branch_from_layer_input"},
        ),
        ("rms_norm", Conventions(norm_kind="rms_norm"), {"layer_norm.gain_plus_one"}),
        ("scale_norm", Conventions(), {"layer_norm.gain_plus_one", "layer_norm.gain_unused"}),
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
    found = list(more_hypotheses(component, params, conventions=conventions))
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


# ------------------------------------------------ parameters read in the wrong place, by class


def _swapped(params, a: str, b: str):  # type: ignore[no-untyped-def]
    """q and k (or any two of q, k, v) exchanged in every attention of ``params``."""
    out = dict(params)
    for key in params:
        for leaf in ("weight", "bias"):
            if key.endswith(f"{a}.{leaf}"):
                other = key[: -len(f"{a}.{leaf}")] + f"{b}.{leaf}"
                out[key], out[other] = params[other], params[key]
    return out


def _read_head_major(params, n_heads: int):  # type: ignore[no-untyped-def]
    """q, k, v stacked [3, H, d] into one fused weight and read back as [H, 3, d]."""
    out = dict(params)
    for key in params:
        for leaf in ("weight", "bias"):
            if not key.endswith(f"q.{leaf}"):
                continue
            stem = key[: -len(f"q.{leaf}")]
            fused = np.concatenate([np.asarray(params[f"{stem}{x}.{leaf}"]) for x in "qkv"])
            per_head = fused.reshape(n_heads, 3, -1, *fused.shape[1:])
            for i, x in enumerate("qkv"):
                out[f"{stem}{x}.{leaf}"] = per_head[:, i].reshape(-1, *fused.shape[1:])
    return out


def _gains_one(params):  # type: ignore[no-untyped-def]
    return {
        k: (np.ones_like(v) if k.split(".")[-2].startswith("norm") and k.endswith("weight") else v)
        for k, v in params.items()
    }


def _first_layer_everywhere(params):  # type: ignore[no-untyped-def]
    out = dict(params)
    for key in params:
        if key.startswith("layers.") and not key.startswith("layers.0."):
            out[key] = params["layers.0." + key.split(".", 2)[2]]
    return out


@pytest.mark.parametrize(
    ("component", "bug", "code"),
    [
        ("mha", lambda p, c: _swapped(p, "q", "k"), "attention.qkv_order_wrong"),
        ("causal_self_attention", lambda p, c: _swapped(p, "k", "v"), "attention.qkv_order_wrong"),
        ("encoder_layer", lambda p, c: _read_head_major(p, c.n_heads), "attention.qkv_order_wrong"),
        ("decoder_block", lambda p, c: _gains_one(p), "layer_norm.gain_unused"),
        ("encoder_layer", lambda p, c: _gains_one(p), "layer_norm.gain_unused"),
        ("encoder", lambda p, c: _first_layer_everywhere(p), "blocks.layer_params_wrong"),
        ("causal_lm", lambda p, c: _first_layer_everywhere(p), "blocks.layer_params_wrong"),
    ],
)
def test_parameters_read_in_the_wrong_place_are_named(component: str, bug, code: str) -> None:  # type: ignore[no-untyped-def]
    """A subject that computes the spec's function of misplaced parameters (written here,
    not with the hypotheses' own code) on every call is named by the class's code."""
    from tck.conformance.diagnosis.explain import explain

    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == component)
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance()
    if component in ("encoder", "causal_lm"):
        assert inst.config.n_layers > 1  # the class needs two layers to tell apart
    wrong = bug(inst.params, inst.config)
    tck.run = lambda inst, given: expected(  # type: ignore[method-assign]
        component, given, wrong, inst.config, inst.conventions
    )
    inputs = tck.inputs(inst, Shape())
    test = tck.run(inst, inputs)
    code_found, message = explain(
        tck, inst, inputs, test, tck.compare(inst, test, tck.gold(inst, inputs))
    )
    assert code_found == code, message


def _in_sublayer(which: int, variant):  # type: ignore[no-untyped-def]
    """The oracle's sublayers, the ``which``-th (0-based, in call order) replaced by
    ``variant`` (written here, not taken from the hypotheses)."""
    from tck.conformance.diagnosis.alternatives import Alternative
    from tck.reference import oracle

    def pieces():  # type: ignore[no-untyped-def]
        seen = [0]

        def sublayer(x, params, norm_prefix, conventions, fn):  # type: ignore[no-untyped-def]
            seen[0] += 1
            if seen[0] - 1 == which:
                return variant(x, params, norm_prefix, conventions, fn)
            return oracle._sublayer(x, params, norm_prefix, conventions, fn)

        return {"_sublayer": sublayer}

    return Alternative("", "", pieces=pieces)


@pytest.mark.parametrize("component", ["decoder_block", "encoder_layer"])
@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("bug", ["no_residual", "other_placement"])
def test_one_sublayer_s_residual_or_placement_is_named(
    component: str, which: int, bug: str
) -> None:
    """One sublayer without its residual add, or one sublayer normalised on the other side
    of its residual (post-LN in a pre-LN layer, pre-LN in a post-LN one)."""
    from tck.conformance.diagnosis.explain import explain
    from tck.reference import oracle

    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == component)
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance()
    post = inst.conventions.norm_placement == "post"

    def no_residual(x, params, prefix, conventions, fn):  # type: ignore[no-untyped-def]
        if post:
            return oracle.norm(fn(x), params, prefix, conventions)
        return fn(oracle.norm(x, params, prefix, conventions))

    def other_placement(x, params, prefix, conventions, fn):  # type: ignore[no-untyped-def]
        if post:
            return x + fn(oracle.norm(x, params, prefix, conventions))
        return oracle.norm(x + fn(x), params, prefix, conventions)

    variant = {"no_residual": no_residual, "other_placement": other_placement}[bug]
    code = {
        "no_residual": "blocks.residual_missing",
        "other_placement": "blocks.norm_placement_pre" if post else "blocks.norm_placement_post",
    }[bug]
    wrong = _in_sublayer(which, variant)
    tck.run = lambda inst, given: output_of(  # type: ignore[method-assign]
        component, given, inst.params, inst.config, inst.conventions, wrong
    )
    inputs = tck.inputs(inst, Shape())
    test = tck.run(inst, inputs)
    found, message = explain(
        tck, inst, inputs, test, tck.compare(inst, test, tck.gold(inst, inputs))
    )
    assert found == code, message
    assert f"sublayer {which + 1} of" in message


@pytest.mark.parametrize("component", ["decoder_block", "encoder_layer"])
def test_every_projection_s_bias_dropped_is_named(component: str) -> None:
    """One shared linear-layer class without its bias: every projection's bias unused at
    once (attention and FFN alike), the norms' shifts kept."""
    from tck.conformance.diagnosis.explain import explain

    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == component)
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance()
    wrong = {
        k: (np.zeros_like(v) if k.endswith(".bias") and ".norm" not in f".{k}" else v)
        for k, v in inst.params.items()
    }
    assert any(k.endswith("fc1.bias") or k.endswith("up.bias") for k in wrong)
    tck.run = lambda inst, given: expected(  # type: ignore[method-assign]
        component, given, wrong, inst.config, inst.conventions
    )
    inputs = tck.inputs(inst, Shape())
    test = tck.run(inst, inputs)
    found, message = explain(
        tck, inst, inputs, test, tck.compare(inst, test, tck.gold(inst, inputs))
    )
    assert found == "params.bias_unused", message
    assert "every linear projection" in message


@pytest.mark.parametrize("component", ["encoder_layer", "decoder_block"])
def test_one_norm_at_another_eps_is_named(component: str) -> None:
    """norm1 built with eps 1e-12 while norm2 keeps the declared eps (a module left at its
    default): layer_norm.eps_wrong, naming the norm."""
    import dataclasses as dc

    from tck.conformance.diagnosis.explain import explain
    from tck.reference import oracle

    def norm(x, params, prefix, conventions):  # type: ignore[no-untyped-def]
        if prefix.endswith("norm1."):
            conventions = dc.replace(conventions, eps=1e-12)
        return oracle.norm(x, params, prefix, conventions)

    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == component)
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance()
    wrong = Alternative("", "", pieces={"norm": norm})
    tck.run = lambda inst, given: output_of(  # type: ignore[method-assign]
        component, given, inst.params, inst.config, inst.conventions, wrong
    )
    inputs = tck.inputs(inst, Shape())
    inputs = {**inputs, "x": inputs["x"] * 1e-3}  # small rows: the eps shows
    test = tck.run(inst, inputs)
    found, message = explain(
        tck, inst, inputs, test, tck.compare(inst, test, tck.gold(inst, inputs))
    )
    assert found == "layer_norm.eps_wrong", message
    assert "norm1 norms" in message


def _cut_in_order(params, order: str):  # type: ignore[no-untyped-def]
    """q, k, v stacked [q | k | v] and cut back in ``order``, each part its own width."""
    out = dict(params)
    for key in params:
        for leaf in ("weight", "bias"):
            if not key.endswith(f"q.{leaf}"):
                continue
            stem = key[: -len(f"q.{leaf}")]
            parts = {x: np.asarray(params[f"{stem}{x}.{leaf}"]) for x in "qkv"}
            rows = np.cumsum([0, *(len(parts[x]) for x in order)])
            fused = np.concatenate([parts[x] for x in "qkv"])
            for x, start, stop in zip(order, rows[:-1], rows[1:], strict=True):
                out[f"{stem}{x}.{leaf}"] = fused[start:stop]
    return out


def test_a_fused_projection_cut_in_another_order_is_named_with_grouped_heads() -> None:
    """With narrower key/value heads a fused [q | k | v] projection cut as k, v, q (each part
    at its own width: GPTBigCode's multi-query split written the other way round) is no
    exchange of whole projections: the parts straddle q, k and v. Named by the class."""
    import dataclasses

    from tck.conformance.diagnosis.explain import explain

    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.component == "causal_self_attention")
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance(dataclasses.replace(tck.instance().config, n_kv_heads=2))
    assert inst.config.kv_heads < inst.config.n_heads
    wrong = _cut_in_order(inst.params, "kvq")
    tck.run = lambda inst, given: expected(  # type: ignore[method-assign]
        "causal_self_attention", given, wrong, inst.config, inst.conventions
    )
    inputs = tck.inputs(inst, Shape())
    test = tck.run(inst, inputs)
    code, message = explain(
        tck, inst, inputs, test, tck.compare(inst, test, tck.gold(inst, inputs))
    )
    assert code == "attention.qkv_order_wrong", message
    assert "k, v, q" in message
