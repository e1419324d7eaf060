"""The dtype sweep and the gradient checks (SPEC.md §10.7, §10.8): the tolerance rule, the
careful run it leans on, the adapter contract's dtype and grad, and a real run."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tck.adapters import Adapter, Subject, Unsupported, load_adapter
from tck.conformance.toolkit import careful
from tck.conformance.toolkit.harness import Harness
from tck.reference import Config
from tck.reference.inputs import Shape
from tck.reference.tolerance import (
    UNIT_ROUNDOFF,
    careful_error,
    compare,
    k_forward,
    k_gradient,
    round_to,
)

REFERENCE = load_adapter("reference")


def subject(adapter: Adapter, name: str) -> Subject:
    return next(s for s in adapter.subjects() if s.name == name)


@pytest.mark.spec("10.7")
def test_round_to_rounds_to_nearest_even_once():
    x = np.array([1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 1.0 + 2.0**-9, 257.0, 1e-8])
    assert round_to(x, "float16").tolist() == [1.0, 1.0 + 2.0**-9, 1.0 + 2.0**-9, 257.0, 0.0]
    assert round_to(x, "bfloat16")[3] == 256.0  # bfloat16 cannot hold 257 (§10.7)
    assert np.array_equal(round_to(round_to(x, "float16"), "float16"), round_to(x, "float16"))
    ids = np.array([3, 4])
    assert round_to(ids, "float16") is ids  # integers and masks pass untouched
    with pytest.raises(ValueError, match="unknown dtype"):
        round_to(x, "float8")


@pytest.mark.spec("10.7")
def test_rule_bounds_by_the_naive_error_and_fails_nan_outright():
    gold = np.array([1.0, 2.0, 3.0])
    ref = gold + np.array([0.0, 0.01, 0.0])
    careful_err, lost = careful_error(ref, gold)
    assert (careful_err, lost) == (pytest.approx(0.01), 0)
    inside = compare(gold + 0.019, gold, dtype="float16", careful_err=careful_err, k=2.0)
    assert inside.passed and inside.bound == pytest.approx(2 * 0.01 + 1e-2 * 3.0)
    assert not compare(gold + 0.06, gold, dtype="float16", careful_err=careful_err, k=2.0).passed
    nan = compare(np.array([1.0, np.nan, 3.0]), gold, dtype="float16", careful_err=1.0, k=8.0)
    assert not nan.passed and nan.nan_mismatch == 1
    assert nan.metrics()["dtype"] == "float16" and nan.metrics()["k"] == 8.0
    assert careful_error(np.array([1.0, np.inf, 3.0]), gold) == (0.0, 1)


@pytest.mark.spec("10.7", "10.8")
def test_multipliers_follow_the_sources_ordering():
    assert k_forward("attention") == 5.0 and k_forward("vit") == 32.0
    assert k_gradient("attention", "v") < k_gradient("attention", "k")
    assert k_gradient("attention", "k") <= k_gradient("attention", "q")
    assert k_gradient("mha", "params.v.weight") < k_gradient("mha", "params.q.weight")


@pytest.mark.spec("10.7")
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", ["attention", "mha", "layer_norm", "encoder_layer", "vit"])
def test_naive_reference_is_finite_and_as_accurate_as_its_dtype(name, dtype):
    """``ref`` (the torch reference in the test dtype) is itself validated: finite on every
    input the checks use, and on ordinary inputs within a few hundred unit roundoffs of the
    oracle (both see the same rounded values). Inputs x30 are ill-conditioned (scores of
    ~1e3, where float16's spacing is 1), so there only finiteness is asked."""
    tck = Harness(REFERENCE, subject(REFERENCE, name), seed=0)
    inst = tck.instance(dtype=dtype)
    for shape in (Shape(), Shape(batch=2, lq=17, lk=65, causal=True), Shape(magnitude=30.0)):
        inputs = tck.inputs(inst, shape)
        ref, gold = careful.careful(tck, inst, inputs), tck.gold(inst, inputs)
        assert np.isfinite(ref).all()
        if shape.magnitude == 1.0:
            scale = max(1.0, float(np.abs(gold).max()))
            assert careful_error(ref, gold)[0] <= 400 * UNIT_ROUNDOFF[dtype] * scale


@pytest.mark.spec("10.8")
def test_naive_gradients_in_float64_equal_autograd_of_the_oracle_path():
    """gold gradients: float64 autograd through the reference equals a finite difference."""
    tck = Harness(REFERENCE, subject(REFERENCE, "layer_norm"), seed=0)
    inst = tck.instance()
    inputs = tck.inputs(inst)
    cotangent = np.random.default_rng(1).standard_normal(tck.gold(inst, inputs).shape)
    grads = careful.gold_gradients(tck, inst, inputs, cotangent)
    step = np.zeros_like(inputs["x"])
    step[1, 2, 3] = 1e-6
    plus = tck.gold(inst, {"x": inputs["x"] + step})
    minus = tck.gold(inst, {"x": inputs["x"] - step})
    numeric = float(((plus - minus) * cotangent).sum() / 2e-6)
    assert grads["x"][1, 2, 3] == pytest.approx(numeric, rel=1e-6)
    assert set(grads) == {"x", "params.weight", "params.bias"}


@pytest.mark.spec("10.8", "0.2")
def test_torch_grad_maps_fused_parameters_to_canonical_names():
    """nn.MultiheadAttention's in_proj_weight gradient comes back split into q, k, v."""
    adapter = load_adapter("torch.nn")
    mha = subject(adapter, "mha")
    handle = adapter.build(mha, Config(d_model=8, n_heads=2), seed=0)
    rng = np.random.default_rng(0)
    x = {k: rng.standard_normal((1, 3, 8)) for k in ("query", "key", "value")}
    cotangent = rng.standard_normal((1, 3, 8))
    grads = adapter.grad(handle, x, cotangent)
    module = handle.module
    module.zero_grad()
    tensors = {k: torch.from_numpy(v) for k, v in x.items()}
    out, _ = module(*tensors.values(), need_weights=False)
    out.backward(torch.from_numpy(cotangent))
    fused = module.in_proj_weight.grad.numpy()
    assert np.allclose(grads["params.k.weight"], fused[8:16], rtol=0, atol=1e-13)
    assert np.allclose(grads["params.o.weight"], module.out_proj.weight.grad.numpy(), atol=1e-13)
    assert grads["query"].shape == (1, 3, 8)


class Float64Only(Adapter):
    """An adapter written before dtypes and grad existed: build takes no dtype."""

    name = "old-style"

    def subjects(self):
        return [Subject("layer_norm", "layer_norm")]

    def build(self, subject, config, *, seed):
        return config

    def run(self, handle, inputs):
        return np.asarray(inputs["x"])


@pytest.mark.spec("10.7", "10.8")
def test_old_adapters_keep_working_and_skip_what_they_lack():
    old = Float64Only()
    tck = Harness(old, old.subjects()[0])
    assert tck.dtypes() == ("float64",)
    inst = tck.instance(params=False)  # float64: build is called as it always was
    with pytest.raises(Unsupported, match="offers float64, not float16"):
        tck.instance(dtype="float16")
    with pytest.raises(Unsupported, match="does not compute gradients"):
        careful.gradients(tck, inst, {"x": np.zeros((1, 2, 3))}, np.zeros((1, 2, 3)))


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def numerics_run(tmp_path_factory) -> dict:
    """The suite's numerics and gradient checks on the reference adapter, as tck runs them."""
    out = tmp_path_factory.mktemp("numerics")
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--pyargs",
        "tck.conformance.checks.test_numerics",
        "tck.conformance.checks.test_gradients",
        "-p",
        "no:cacheprovider",
        "-q",
        "--tck-adapter=reference",
        "--tck-profile=ci",
        f"--tck-out={out}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=out, timeout=600)
    assert (out / "results.json").exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "results.json").read_text())


@pytest.mark.spec("10.7", "10.8", "4.4")
def test_reference_passes_in_every_dtype_forward_and_backward(numerics_run):
    results = numerics_run["results"]
    bad = [f"{r['check']}[{r['subject']}]" for r in results if r["status"] in ("fail", "error")]
    assert not bad
    passed = [r for r in results if r["status"] == "pass"]
    for dtype in ("float16", "bfloat16"):
        assert sum(r["metrics"].get("dtype") == dtype for r in passed) >= 10, dtype
    gradients = [r for r in passed if "grad_of" in r["metrics"]]
    assert len(gradients) >= 10
    for r in passed:
        if r["check"].startswith("numerics.") or r["check"] == "gradients.gradients":
            assert {"dtype", "max_abs_err", "mean_abs_err", "bound", "ratio"} <= set(r["metrics"])
            assert r["metrics"]["ratio"] <= 1.0
            assert "ref_nonfinite" not in r["metrics"]  # the careful run never overflowed


def _float32_only_wrong_pe() -> Adapter:
    """A sinusoidal table offered in float32 only (build refuses float64), off by 1e-2."""
    from tck.adapters import TorchEntry, TorchModuleAdapter
    from tck.reference import canonical_conventions
    from tck.reference import model as ref

    conventions = canonical_conventions("sinusoidal_pe")
    return TorchModuleAdapter(
        "float32-only",
        [
            TorchEntry(
                "sinusoidal_pe",
                make=lambda config: ref.build("sinusoidal_pe", config, conventions),
                forward=lambda m, positions: m(m.max_len)[positions] + 1e-2,
                conventions=conventions,
            )
        ],
        dtypes=("float32",),
    )


@pytest.mark.spec("10.7")
def test_float32_only_subject_still_fails_on_a_wrong_float32_result():
    """_dtype_specific asks for a float64 instance to tell a precision bug from a plain one;
    a subject that cannot be built in float64 must keep its float32 failure, not skip."""
    from tck.conformance.checks import test_numerics as checks
    from tck.conformance.toolkit.results import CheckFailure

    adapter = _float32_only_wrong_pe()
    tck = Harness(adapter, adapter.subjects()[0])
    with pytest.raises(Unsupported):
        tck.instance()  # float64 is refused
    with pytest.raises(CheckFailure) as failed:
        checks.test_dtype_sweep(tck, "float32")
    assert failed.value.code.startswith("positional.")
    with pytest.raises(CheckFailure):
        checks.test_long_positions(tck, "float32")
