"""SPEC.md §10.12, float32 islands: decoders written as public minimal LLM code is, each with
one step computed in float32 on purpose inside a float64 build (tests/support/island_models:
Meta's RMSNorm statistics of ``x.float()``, Meta's ``complex64`` RoPE table, nanoGPT's GELU
with a float32 ``sqrt(2/pi)``), run through ``tck run`` in float64:

- declared (``Conventions.float32_steps``): no failure, a convention row, and no check
  skipped for a dtype it would otherwise run in;
- undeclared: exactly one finding per subject, ``numerics.float32_island``, naming the step,
  and no other code anywhere in the run (no structural hypothesis recorded);
- the same models with eps outside the square root of their norm (a real ~5e-6 relative bug)
  still fail, under the norm's own codes, declared island or not.

And the pieces: the declaration's validation, the island bound and its context, and the
float32-precision retry of the diagnosis, which tries the plain oracle first.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import island_models
from support.forked_run import tck_run

from tck.adapters import load_adapter
from tck.conformance.checks import test_islands
from tck.conformance.diagnosis import islands
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.recorder import Recorder
from tck.conformance.toolkit.results import CheckFailure
from tck.reference import Conventions
from tck.reference.inputs import Shape
from tck.reference.tolerance import (
    FLOOR,
    ISLAND_FLOOR,
    UNIT_ROUNDOFF,
    compare,
    float64_floor,
    floor_of,
)

pytestmark = pytest.mark.spec("10.12")

MODELS = tuple(island_models.ISLANDS)
# The subject of each model that holds its island (llama_rope's RMSNorm is all float64).
ISLAND_SUBJECT = {
    "llama_norm": "rms_norm",
    "llama_rope": "rope",
    "gpt_block": "decoder_block",
    "gpt_attention": "causal_self_attention",
}
TIMEOUT_S = 600.0
FLOAT64_SKIP = re.compile(r"not float64|float64[- ]only|(does not|cannot) run in float64")


def _run(tmp_path: Path, attr: str) -> dict[str, Any]:
    out = tmp_path / attr
    out.mkdir(parents=True, exist_ok=True)
    args = ["--adapter", f"support.island_models:{attr}", "--seed", "0", "--out", str(out)]
    code = tck_run(args, cwd=out, log=out / "tck-run.log", timeout_s=TIMEOUT_S, html=False)
    results = out / "results.json"
    assert results.exists(), (out / "tck-run.log").read_text(encoding="utf-8")[-4000:]
    document = json.loads(results.read_text(encoding="utf-8"))
    document["returncode"] = code
    return document


def _bad(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in document["results"] if r["status"] in ("fail", "error")]


def _codes(rows: list[dict[str, Any]]) -> set[str]:
    return {r["diagnosis"]["code"] for r in rows}


@pytest.mark.parametrize("model", MODELS)
def test_declared_island_passes_every_check(tmp_path: Path, model: str) -> None:
    document = _run(tmp_path, f"{model}_declared")
    assert not _bad(document), [(r["check"], r["diagnosis"]["code"]) for r in _bad(document)]
    assert document["returncode"] == 0
    rows = [r for r in document["results"] if r["check"] == "numerics.float32_islands"]
    shown = [r for r in rows if r["subject"] == ISLAND_SUBJECT[model]]
    assert [r["status"] for r in shown] == ["convention"]
    assert shown[0]["diagnosis"]["code"] == islands.DECLARED
    assert island_models.ISLANDS[model] in shown[0]["diagnosis"]["message"]
    # the float64 checks ran: nothing skipped for want of float64 (a dtype the model does
    # not offer at all, float16 for a complex64 table, is the model's own skip)
    for r in document["results"]:
        if r["status"] == "skip":
            assert not FLOAT64_SKIP.search(r["diagnosis"]["message"]), (r["check"], r["diagnosis"])
    ran = {r["check"] for r in document["results"] if r["status"] == "pass"}
    assert {"equality.oracle", "gradients.gradients", "params.round_trip"} <= ran


@pytest.mark.parametrize("model", MODELS)
def test_undeclared_island_is_one_finding(tmp_path: Path, model: str) -> None:
    document = _run(tmp_path, model)
    bad = _bad(document)
    assert [(r["subject"], r["check"]) for r in bad] == [
        (ISLAND_SUBJECT[model], "numerics.float32_islands")
    ], [(r["check"], r["diagnosis"]["code"]) for r in bad]
    finding = bad[0]["diagnosis"]
    assert finding["code"] == islands.FINDING
    assert island_models.ISLANDS[model] in finding["message"]  # the step it may be
    assert "float32_steps" in finding["message"]  # the declaration that accepts it
    assert bad[0]["metrics"]["float32_roundoffs"] > 0
    # no hypothesis was recorded anywhere in the run (no structural code in disguise)
    assert not [r for r in document["results"] if "reproduced_by" in (r.get("metrics") or {})]
    assert document["returncode"] == 1


@pytest.mark.parametrize("model", ("llama_norm", "gpt_block"))
@pytest.mark.parametrize("declared", (True, False), ids=("declared", "undeclared"))
def test_a_real_norm_bug_still_fails_under_its_code(
    tmp_path: Path, model: str, declared: bool
) -> None:
    document = _run(tmp_path, f"{model}{'_declared' if declared else ''}_bug")
    bad = _bad(document)
    codes = _codes([r for r in bad if r["check"] in ("equality.oracle", "norm.output_statistics")])
    assert any(c.startswith("layer_norm.") for c in codes), codes
    if model == "gpt_block":
        assert "layer_norm.eps_outside_sqrt" in codes
    # the bug is not taken for float32 rounding
    assert islands.FINDING not in _codes(bad)
    assert "numerics.float64_precision_lost" not in _codes(bad)


def test_the_declaration_is_validated_and_normalised() -> None:
    steps = Conventions(float32_steps=("rope_table", "norm_statistics", "rope_table"))
    assert steps.float32_steps == ("norm_statistics", "rope_table")
    assert steps.deviations() == {"float32_steps": ((), ("norm_statistics", "rope_table"))}
    with pytest.raises(ValueError, match="float32_steps"):
        Conventions(float32_steps=("norm_stats",))
    with pytest.raises(ValueError, match="float32_steps"):
        Conventions(float32_steps="softmax")  # a string, not a tuple of steps


def test_island_bound_is_derived_from_float32_roundoff() -> None:
    assert ISLAND_FLOOR == 16 * UNIT_ROUNDOFF["float32"]
    gold = np.linspace(-2.0, 2.0, 64)
    rounded = gold.astype(np.float32).astype(np.float64)  # one float32 rounding
    eps_outside = gold * (1.0 + 5e-6)  # eps 1e-5 outside the sqrt, unit-variance rows
    assert not compare(rounded, gold).passed and floor_of("float64") == FLOOR["float64"]
    with float64_floor(ISLAND_FLOOR):
        assert floor_of("float64") == ISLAND_FLOOR and floor_of("float32") == FLOOR["float32"]
        assert compare(rounded, gold).passed
        assert not compare(eps_outside, gold).passed
    assert floor_of("float64") == FLOOR["float64"]


def _harness(attr: str, component: str) -> tuple[Harness, Any]:
    adapter = getattr(island_models, attr)
    subject = next(s for s in adapter.subjects() if s.component == component)
    return Harness(adapter, subject, record=Recorder()), subject


@pytest.mark.parametrize(
    ("model", "shape"),
    [
        ("llama_norm", Shape()),
        ("gpt_block", Shape(batch=1, lq=1, lk=1, masked=False, causal=True)),  # length 1
        ("gpt_block", Shape(batch=2, lq=7, lk=7, causal=True)),
    ],
    ids=("rms_norm", "block_length_1", "block_length_7"),
)
def test_retry_tries_the_plain_oracle_first(model: str, shape: Shape) -> None:
    """At float64's floor (no island measured), a float32 island's mismatch is named
    ``numerics.float64_precision_lost`` and no hypothesis is recorded: the unmodified spec
    fits at float32 precision, so nothing else can be told apart from it."""
    tck, _ = _harness(model, ISLAND_SUBJECT[model])
    inst = tck.instance()
    inputs = tck.inputs(inst, shape)
    with pytest.raises(CheckFailure) as failure:
        tck.assert_matches_oracle(inst, inputs)
    assert failure.value.code == "numerics.float64_precision_lost"
    # what reproduced it is the spec itself at float32 precision, no other hypothesis
    assert tck.record.metrics.get("reproduced_by") == "numerics.float64_precision_lost"
    assert "explained_by" not in tck.record.metrics


@pytest.mark.parametrize("model", MODELS)
def test_measure_finds_each_island_once(model: str) -> None:
    tck, _ = _harness(model, ISLAND_SUBJECT[model])
    found = islands.measure(tck)
    assert isinstance(found, islands.Island) and found.status == "island", found
    assert 0 < found.roundoffs <= 16
    assert islands.measure(tck) is found  # once per subject
    # each check builds its own Harness, which wraps the adapter anew: still measured once
    again, _ = _harness(model, ISLAND_SUBJECT[model])
    assert again.adapter is not tck.adapter and islands.measure(again) is found
    assert island_models.ISLANDS[model] in islands.candidate_steps(tck.component)
    assert islands.subject_floor(tck) == ISLAND_FLOOR


def test_no_island_is_measured_on_a_float64_subject() -> None:
    tck, _ = _harness("llama_rope", "rms_norm")  # the rope model's norm is all float64
    found = islands.measure(tck)
    assert isinstance(found, islands.Island) and found.status == "exact"
    assert islands.subject_floor(tck) is None


@pytest.mark.spec("10.12", "5.2")
def test_a_small_float64_bug_is_not_taken_for_an_island() -> None:
    """eps outside the square root with eps = 1e-6 moves a LayerNorm by about eps / std,
    a few float32 roundoffs: within the island bound, but a float64 hypothesis reproduces
    it to float64's own floor, which float32 rounding never is. No island, no island bound:
    the oracle comparison fails at float64's floor and names the eps placement."""
    from tck.adapters.mutants import layer_norm_std_plus_eps as bug
    from tck.adapters.mutants import tutorial
    from tck.conformance.checks import test_equality

    class SmallEps(bug.LayerNorm):
        def __init__(self, features: int, eps: float = 1e-6) -> None:
            super().__init__(features, eps=1e-6)

    adapter = tutorial.mutant(
        "eps_outside_small",
        tutorial.layer_norm_entry(SmallEps, conventions=Conventions(eps=1e-6)),
    )
    subject = next(iter(adapter.subjects()))
    found = islands.measure(Harness(adapter, subject, seed=0, record=Recorder()))
    assert isinstance(found, islands.Island) and found.status == "explained", found
    assert found.max_abs_err <= found.bound  # small enough to pass for float32 rounding
    assert found.explained_by == "layer_norm.eps_outside_sqrt"
    tck = Harness(adapter, subject, seed=0, record=Recorder())
    assert islands.subject_floor(tck) is None
    with pytest.raises(CheckFailure) as failure:
        test_equality.test_oracle(tck)
    assert failure.value.code == "layer_norm.eps_outside_sqrt"


def test_a_declared_step_widens_only_the_subjects_that_hold_it() -> None:
    """A model's conventions are shared by its subjects: float32 norm statistics declared
    for the model say nothing about a RoPE subject, which holds no norm. Its checks keep
    float64's floor, and a float32 step it does have is measured as undeclared."""
    norms = Conventions(float32_steps=("norm_statistics",))
    assert islands.held_steps("rope", norms) == ()
    assert islands.held_steps("causal_self_attention", norms) == ()
    assert islands.held_steps("decoder_block", norms) == ("norm_statistics",)
    assert islands.held_steps("causal_lm", norms) == ("norm_statistics",)
    adapter = load_adapter("mutants.rope_float32_beside_declared_norms")
    subject = next(iter(adapter.subjects()))
    tck = Harness(adapter, subject, seed=0, record=Recorder())
    assert islands.subject_floor(tck) == ISLAND_FLOOR  # measured: an undeclared island
    with pytest.raises(CheckFailure) as failure:
        test_islands.test_float32_islands(tck)
    assert failure.value.code == islands.FINDING
    assert "rope_angles" in failure.value.message


def test_an_output_cast_to_float32_is_a_finding_whatever_is_declared() -> None:
    """Every value of a float64 output exactly a float32 number: the result was cast, a step
    no declaration covers (the logits of huggingface/transformers#29285's ``.float()``)."""
    rng = np.random.default_rng(0)
    values = rng.standard_normal((2, 5, 8))
    assert not islands.rounded_output(values)
    rounded = values.astype(np.float32).astype(np.float64)
    assert islands.rounded_output(rounded)
    assert not islands.rounded_output(np.zeros((2, 5, 8)))  # nothing to tell by
    assert not islands.rounded_output(rounded[0, 0, :4])  # too few values to tell by
    ignore = np.zeros(values.shape, bool)
    ignore[0] = True
    mixed = np.concatenate([values[:1], rounded[1:]])
    assert islands.rounded_output(mixed, ignore)  # only judged values count
    adapter = load_adapter("mutants.lm_logits_float32")
    subject = next(iter(adapter.subjects()))
    tck = Harness(adapter, subject, seed=0, record=Recorder())
    found = islands.measure(tck)
    assert isinstance(found, islands.Island) and found.output_in_float32, found
    with pytest.raises(CheckFailure) as failure:
        test_islands.test_float32_islands(tck)
    assert failure.value.code == islands.FINDING
    assert "rounded to float32" in failure.value.message


@pytest.mark.parametrize(
    ("mutant", "dtype"),
    [("lm_softmax_in_float16", "float16"), ("encoder_softmax_in_bfloat16", "bfloat16")],
)
def test_a_softmax_pinned_to_16_bits_is_named_with_its_dtype(mutant: str, dtype: str) -> None:
    """A float64 build whose softmax is taken in a 16-bit dtype (``softmax(..., dtype=
    torch.float16)``) is beyond the float32-island bound, and the torch reference with that
    one step in that dtype reproduces it: the finding names the quantity and the dtype, as
    reproduced (the strongest evidence, so it leads the symptoms it causes)."""
    adapter = load_adapter(f"mutants.{mutant}")
    subject = next(iter(adapter.subjects()))
    tck = Harness(adapter, subject, seed=0, record=Recorder())
    found = islands.measure(tck)
    assert isinstance(found, islands.Island) and found.status == "beyond", found
    assert found.sixteen_bit == ("softmax", dtype)
    with pytest.raises(CheckFailure) as failure:
        test_islands.test_float32_islands(tck)
    assert failure.value.code == "numerics.softmax_low_precision"
    assert dtype in failure.value.message
    assert failure.value.metrics["reproduced_by"] == "numerics.softmax_low_precision"


def test_a_declared_float32_step_does_not_cover_16_bits() -> None:
    """A subject that declares its softmax in float32 and takes it in bfloat16 is named too:
    the declaration covers float32 rounding, and bfloat16's is beyond its bound."""
    from tck.adapters.mutants import encoder_softmax_in_bfloat16 as bug
    from tck.adapters.mutants import tutorial

    adapter = tutorial.mutant(
        "declared_float32_softmax_in_bfloat16",
        tutorial.encoder_layer_entry(
            bug.EncoderLayer, conventions=Conventions(float32_steps=("softmax",))
        ),
    )
    subject = next(iter(adapter.subjects()))
    tck = Harness(adapter, subject, seed=0, record=Recorder())
    with pytest.raises(CheckFailure) as failure:
        test_islands.test_float32_islands(tck)
    assert failure.value.code == "numerics.softmax_low_precision"


def test_the_reference_forms_a_quantity_in_the_dtype_asked_for() -> None:
    """``computed_in(dtype, quantity)`` rounds that step of a float64 run to ``dtype`` and
    nothing else: the softmax of float16 scores, as ``softmax(s, dtype=torch.float16)``."""
    import torch

    from tck.reference import model

    q = torch.randn(2, 3, 5, 4, dtype=torch.float64) * 3  # d_k = 4: the scale is 1/2
    values = torch.randn(2, 3, 5, 4, dtype=torch.float64)
    plain = model.scaled_dot_product_attention(q, q, values)
    for dtype in ("float32", "float16", "bfloat16"):
        with model.computed_in(dtype, "softmax"):
            pinned = model.scaled_dot_product_attention(q, q, values)
        scores = (q @ q.transpose(-2, -1) / 2.0).to(getattr(torch, dtype))
        by_hand = torch.softmax(scores, dim=-1).to(torch.float64) @ values
        assert torch.allclose(pinned, by_hand, rtol=0, atol=1e-12)
        assert not torch.equal(pinned, plain)
    assert model._ISLAND_DTYPE == torch.float32  # restored
    with pytest.raises(ValueError, match="island dtype"):
        with model.computed_in("int8", "softmax"):
            pass
