"""Honest verdicts (SPEC.md §10.7, §10.11, §11.7): a NaN on both sides of a comparison of an
implementation with itself is not agreement, an overflowing careful run excuses no overflow,
float64 bounds scale with the values, and a check that verified nothing is not a pass."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter, Unsupported, load_adapter
from tck.conformance.checks import test_blocks, test_decoder
from tck.conformance.toolkit.deltas import delta, real_positions
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure
from tck.reference.inputs import Shape
from tck.reference.tolerance import compare


def subject(adapter, name: str):
    return next(s for s in adapter.subjects() if s.name == name)


# ------------------------------------------------------------- NaN on both sides (§10.7)


@pytest.mark.spec("10.7")
def test_compare_counts_nonfinite_on_both_sides_where_finite_is_required() -> None:
    a = np.array([[1.0, np.nan, 3.0], [np.inf, 5.0, 6.0]])
    b = np.array([[1.0, np.nan, 3.0], [np.inf, 5.0, 6.0]])
    # NaN and the same inf in both: the oracle's own policy (§4.4) agrees, by default
    assert compare(a, b).passed
    strict = compare(a, b, require_finite=True)
    assert not strict.passed and strict.nonfinite
    assert (strict.nonfinite_test, strict.nonfinite_gold, strict.worst_index) == (2, 2, (0, 1))
    assert strict.max_abs_err == 0.0  # the finite positions agree; the NaN decides
    assert "2 position(s) of the test and 2 of the gold" in strict.describe_nonfinite()
    # only where required: a pad position may be NaN on both sides
    real = np.array([[True, False, True], [False, True, True]])
    assert compare(a, b, require_finite=real).passed


@pytest.mark.spec("10.7")
def test_an_infinite_gold_value_sets_no_scale() -> None:
    """An inf in the reference side used to make the bound inf, excusing every position."""
    gold = np.array([np.inf, 1.0, 2.0])
    assert not compare(np.array([np.inf, 1.0, 7.0]), gold).passed
    assert not compare(np.array([-np.inf, 1.0, 2.0]), gold).passed
    assert compare(np.array([np.inf, 1.0, 2.0]), gold).bound == pytest.approx(2e-10)
    assert delta(gold, np.array([np.inf, 1.0, 7.0])).changed


@pytest.mark.spec("10.7")
def test_delta_requires_finite_at_real_positions_only() -> None:
    out = np.ones((2, 3, 4))
    out[1, 2] = np.nan  # the last position of row 1: a pad there
    keep = np.array([[True, True, True], [True, True, False]])
    assert not delta(out, out.copy()).changed  # NaN stays NaN: unchanged (masks' checks)
    assert not delta(out, out.copy(), real=real_positions({"key_padding": keep}, out.shape)).changed
    out[1, 0] = np.nan  # a real token
    found = delta(out, out.copy(), real=real_positions({"key_padding": keep}, out.shape))
    assert found.changed and found.nonfinite
    assert found.index == (1, 0, 0) and "real position(s) are NaN or inf" in found.describe()


class NegInfLayer(nn.Module):
    """A pre-LN causal layer in the style of minimal GPT code: scores of masked keys are
    filled with -inf, so a left pad (whose causal row holds only pads) gets a NaN row."""

    def __init__(self, d: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x, past=None, keep=None):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(d, dim=2)
        q, k, v = (t.view(b, n, self.n_heads, -1).transpose(1, 2) for t in (q, k, v))
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        total = k.shape[2]
        allowed = torch.ones(n, total, dtype=torch.bool).tril(diagonal=total - n)
        if keep is not None:
            allowed = allowed & keep[:, None, None, :]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
        att = att.masked_fill(~allowed, float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln_2(x)))), (k, v)


class NegInfStack(nn.Module):
    """Two such layers: the NaN of a pad row in layer 1 is a NaN key and value in layer 2,
    and 0 * NaN is NaN: every real token of a left-padded row becomes NaN."""

    def __init__(self, d: int, n_heads: int):
        super().__init__()
        self.layers = nn.ModuleList(NegInfLayer(d, n_heads) for _ in range(2))

    def forward(self, x, cache=None, keep=None):
        new = []
        for i, layer in enumerate(self.layers):
            x, kv = layer(x, None if cache is None else cache[i], keep)
            new.append(kv)
        return x, new


def _neg_inf_step(module, cache, x, positions=None, key_padding=None):
    out, cache = module(x, cache, key_padding)
    return out, cache


class NoParams(TorchModuleAdapter):
    """Modules offered without a parameter map: only the parameter-free checks apply."""

    def load(self, handle, params):
        raise Unsupported(f"{self.name} maps no canonical parameters")

    def params(self, handle):
        raise Unsupported(f"{self.name} maps no canonical parameters")


NEG_INF = NoParams(
    "verdicts.neg_inf_fill",
    [
        TorchEntry(
            "decoder_block",
            make=lambda c: NegInfStack(c.d_model, c.n_heads),
            # no positional encoding: the position ids change nothing
            forward=lambda m, x, key_padding=None, positions=None: m(x, keep=key_padding)[0],
            step=_neg_inf_step,
        )
    ],
)


@pytest.mark.spec("10.7", "11.6", "11.7")
def test_cache_comparison_with_nan_on_both_sides_fails_naming_it() -> None:
    """Cached decoding and the full forward are both NaN at the real tokens of the shorter
    left-padded row: that is a failure naming the non-finite output, never agreement."""
    tck = Harness(NEG_INF, subject(NEG_INF, "decoder_block"), seed=0)
    with pytest.raises(CheckFailure) as failed:
        test_decoder.test_kv_cache_left_padded(tck)
    assert failed.value.code == "numerics.nonfinite_output"
    assert "NaN or inf" in failed.value.message and "0 > bound" not in failed.value.message
    assert failed.value.metrics["nonfinite_test"] > 0
    # the same subject, unpadded: finite, and the cache agrees
    test_decoder.test_kv_cache(Harness(NEG_INF, subject(NEG_INF, "decoder_block"), seed=0))


@pytest.mark.spec("10.7", "11.7")
def test_left_padding_with_nan_at_real_tokens_fails_naming_it() -> None:
    tck = Harness(NEG_INF, subject(NEG_INF, "decoder_block"), seed=0)
    with pytest.raises(CheckFailure) as failed:
        test_decoder.test_left_padding(tck)
    assert failed.value.code == "numerics.nonfinite_output"


class NanAtRealTokens(nn.Module):
    """An encoder-style layer whose output is NaN on every call (a 0/0 normalisation):
    every comparison with itself meets the same NaN on both sides."""

    def forward(self, x, key_padding=None):
        return x / (x - x).sum(-1, keepdim=True)  # 0/0 everywhere


@pytest.mark.spec("10.1", "10.7")
def test_determinism_with_nan_on_both_sides_fails_naming_it() -> None:
    adapter = NoParams(
        "verdicts.nan_everywhere",
        [TorchEntry("layer_norm", make=lambda c: NanAtRealTokens(), forward=lambda m, x: m(x))],
    )
    tck = Harness(adapter, subject(adapter, "layer_norm"), seed=0)
    with pytest.raises(CheckFailure) as failed:
        test_blocks.test_eval_determinism(tck)
    assert failed.value.code == "numerics.nonfinite_output"


# ----------------------------------------------------- an overflowing yardstick (§10.7)


@pytest.mark.spec("10.7", "10.10")
def test_overflow_fails_where_the_careful_run_overflows_too() -> None:
    """An encoder layer in float16 on inputs ~3e3 (a trained model's outlier features): the
    FFN's hidden values pass 65504 in the subject and in the careful run alike, while the
    float64 oracle is finite. The subject's inf/NaN is an overflow; it used to be dropped
    from the comparison with the careful run's positions (a pass with error 0.0)."""
    reference = load_adapter("reference")
    tck = Harness(reference, subject(reference, "encoder_layer"), seed=0)
    inst = tck.instance(dtype="float16")
    inputs = tck.inputs(inst, Shape(batch=2, lq=5, lk=5, masked=False, magnitude=3e3))
    with pytest.raises(CheckFailure) as failed:
        tck.assert_matches_oracle(inst, inputs)
    assert failed.value.code == "numerics.overflow"
    assert tck.record.metrics["ref_nonfinite"] == 2 * 5 * 24  # the careful run overflowed too
    assert failed.value.metrics["nan_mismatch"] == 2 * 5 * 24


@pytest.mark.spec("10.7")
def test_finite_output_where_only_the_careful_run_overflows_is_not_judged() -> None:
    """Where the careful run overflows and the output is finite, nothing bounds the output
    there: those positions are left out, the others are judged as before."""
    reference = load_adapter("reference")
    tck = Harness(reference, subject(reference, "ffn"), seed=0)
    inst = tck.instance(dtype="float16")
    gold = np.array([[1.0, 2.0, 3.0e4]])
    careful = np.array([[1.0, 2.0, np.inf]])
    assert tck.compare(inst, np.array([[1.0, 2.0, 5.0]]), gold, careful=careful).passed
    assert not tck.compare(inst, np.array([[1.0, 2.0, np.inf]]), gold, careful=careful).passed
    assert not tck.compare(inst, np.array([[1.0, 2.5, 5.0]]), gold, careful=careful).passed


# ------------------------------------------------- runs that verified nothing (§10.11)


def _tck_run(args: list[str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tck", "run", *args, "-n", "0", "--profile", "ci"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


REFUSES = """
from torch import nn
from tck.adapters import TorchEntry, TorchModuleAdapter, Unsupported


class Refuses(TorchModuleAdapter):
    def build(self, subject, config, *, seed, **kwargs):
        raise Unsupported("this subject builds in no configuration the checks ask for")


adapter = Refuses(
    "refuses",
    [TorchEntry("layer_norm", make=lambda c: nn.LayerNorm(c.d_model), forward=lambda m, x: m(x))],
)
"""


@pytest.mark.spec("10.11")
def test_a_run_that_verified_nothing_exits_non_zero(tmp_path) -> None:
    (tmp_path / "refuses_everything.py").write_text(REFUSES)
    proc = _tck_run(["--adapter", "refuses_everything:adapter", "--out", "out"], tmp_path)
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    assert document["summary"]["passed"] == 0 and document["summary"]["skipped"] > 0
    assert document["unverified_subjects"] == ["layer_norm"]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "NOTHING VERIFIED on 1 subject(s): layer_norm" in proc.stdout


@pytest.mark.spec("10.11")
def test_unverified_subjects_leave_out_nothing_that_verified() -> None:
    from tck.conformance.runner.plugin import unverified_subjects

    rows = [
        {"subject": "a", "status": "skip"},
        {"subject": "a", "status": "unverified"},
        {"subject": "b", "status": "skip"},
        {"subject": "b", "status": "pass"},
        {"subject": "c", "status": "fail"},
        {"subject": "d", "status": "convention"},
    ]
    assert unverified_subjects(rows) == ["a"]


@pytest.mark.spec("10.9", "10.2", "10.1")
def test_float32_onnx_file_runs_the_parameter_free_checks_in_float32(tmp_path) -> None:
    """An exported float32 encoder layer without a map: batching, padding, determinism and
    shapes run on the graph in float32 (they used to skip: 0 passed, 38 skipped, exit 0)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    import dataclasses

    import onnx

    from tck.adapters.onnx_runtime import export
    from tck.adapters.reference import adapter
    from tck.conformance.toolkit.harness import DEFAULT_CONFIG
    from tck.reference import init_params

    config = dataclasses.replace(DEFAULT_CONFIG, d_model=16, n_heads=2, d_ff=24)
    layer = subject(adapter, "encoder_layer")
    handle = adapter.build(layer, config, seed=0, dtype="float32")
    adapter.load(handle, init_params("encoder_layer", config, layer.conventions, seed=3))
    x = torch.randn(2, 5, config.d_model, dtype=torch.float32)
    keep = torch.tensor([[True] * 5, [True, True, True, False, False]])
    onnx.save(export(handle, {"x": x, "key_padding": keep}), str(tmp_path / "layer32.onnx"))
    args = ["--adapter", "onnx:layer32.onnx", "--component", "encoder_layer", "--out", "out"]
    proc = _tck_run(args, tmp_path)
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    passed = {r["check"] for r in document["results"] if r["status"] == "pass"}
    assert {
        "blocks.batch_independence",
        "blocks.eval_determinism",
        "masks.padding_invariance",
        "shapes.output_shapes",
    } <= passed, sorted(passed)
    assert document["summary"]["failed"] == 0 and "unverified_subjects" not in document
    assert proc.returncode == 0, proc.stdout + proc.stderr


class ReadsItsOwn(NoParams):
    """Cannot load; params() answers anyway, with the wrong shape."""

    def params(self, handle):
        return {"weight": np.zeros(3), "bias": np.zeros(3)}


@pytest.mark.spec("0.2", "0.5")
def test_round_trip_skips_when_nothing_could_be_loaded() -> None:
    """It used to compare params() with itself and pass, wrong shapes and all."""
    from tck.conformance.checks import test_params

    adapter = ReadsItsOwn(
        "verdicts.reads_its_own",
        [
            TorchEntry(
                "layer_norm", make=lambda c: nn.LayerNorm(c.d_model), forward=lambda m, x: m(x)
            )
        ],
    )
    tck = Harness(adapter, subject(adapter, "layer_norm"), seed=0)
    with pytest.raises(pytest.skip.Exception, match="cannot load canonical parameters"):
        test_params.test_round_trip(tck)
    # an adapter that loads still round-trips
    test_params.test_round_trip(
        Harness(load_adapter("reference"), subject(load_adapter("reference"), "layer_norm"))
    )


# ----------------------------------------------------- one row per failed export (§10.9)


@pytest.mark.spec("10.9")
def test_an_export_failure_is_one_failing_row_per_subject() -> None:
    from tck.conformance.runner.plugin import one_export_failure
    from tck.conformance.toolkit.results import Result

    def row(check: str, subject: str, code: str = "onnx.export_failed", status: str = "error"):
        return Result(check, ["10.9"], "mha", subject, status, {"code": code, "message": "boom\nx"})

    rows = [
        row("attention.oracle", "mha[x]@ort.enable_all"),
        row("onnx.dynamic_axes", "mha[x]@ort.enable_all", status="fail"),
        row("onnx.opset", "mha[x]@ort.enable_all", status="fail"),
        row("blocks.batch_independence", "mha[x]@ort.disable_all"),
        row("attention.oracle", "mha[x]@ort.disable_all"),
        row("attention.oracle", "mha[x]", code="attention.oracle_mismatch", status="fail"),
    ]
    one_export_failure(rows)
    failing = [(r.check, r.subject) for r in rows if r.status in ("fail", "error")]
    assert failing == [
        ("onnx.dynamic_axes", "mha[x]@ort.enable_all"),
        ("attention.oracle", "mha[x]@ort.disable_all"),
        ("attention.oracle", "mha[x]"),  # not an export failure: untouched
    ]
    skipped = [r for r in rows if r.status == "skip"]
    assert len(skipped) == 3
    assert all("onnx.export_failed" in r.diagnosis["message"] for r in skipped)
    assert "reported once, on onnx.dynamic_axes): boom" in skipped[0].diagnosis["message"]
    assert "2 other check(s)" in rows[1].diagnosis["message"]


NOT_EXPORTABLE = '''
import torch
from torch import nn
from tck.adapters import TorchEntry, TorchModuleAdapter


class Guarded(nn.LayerNorm):
    """A norm with a data-dependent branch (torch.equal), which the dynamo exporter cannot
    trace (DataDependentOutputException: aten.equal.default)."""

    def forward(self, x):
        if torch.equal(x, x + 1):  # never: the branch only stops the tracer
            return x
        return super().forward(x)


adapter = TorchModuleAdapter(
    "not_exportable",
    [TorchEntry("layer_norm", make=lambda c: Guarded(c.d_model), forward=lambda m, x: m(x))],
)
'''


@pytest.mark.spec("10.9")
def test_tck_run_export_failure_is_one_row_per_exported_subject(tmp_path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    (tmp_path / "not_exportable.py").write_text(NOT_EXPORTABLE)
    args = ["--adapter", "not_exportable:adapter", "--export", "onnx", "--out", "out"]
    proc = _tck_run(args, tmp_path)
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    bad = [r for r in document["results"] if r["status"] in ("fail", "error")]
    by_subject = {r["subject"]: r for r in bad}
    assert len(bad) == len(by_subject) == 2, [(r["check"], r["subject"]) for r in bad]
    assert set(by_subject) == {"layer_norm@ort.enable_all", "layer_norm@ort.disable_all"}
    assert {r["diagnosis"]["code"] for r in bad} == {"onnx.export_failed"}
    assert by_subject["layer_norm@ort.enable_all"]["check"] == "onnx.dynamic_axes"
    cited = [r for r in document["results"] if "reported once" in r["diagnosis"]["message"]]
    assert cited and all(r["status"] == "skip" for r in cited)
    assert proc.returncode == 1


# ------------------------------------------------------------ pads and positions (§11.7)


def _positions_from_mask(m, x, key_padding=None):
    """transformers' rule when no position ids are given: cumsum(mask) - 1, and 1 at pads
    (``position_ids.masked_fill_(attention_mask == 0, 1)``)."""
    positions = None
    if key_padding is not None:
        positions = (key_padding.long().cumsum(-1) - 1).masked_fill(~key_padding, 1)
    return m(x, key_padding, positions)


def _cumsum_adapter(component: str) -> TorchModuleAdapter:
    from tck.adapters.reference import LLAMA
    from tck.reference import model as ref

    return TorchModuleAdapter(
        f"verdicts.positions_from_mask.{component}",
        [
            TorchEntry(
                component,
                make=lambda config: ref.build(component, config, LLAMA),
                forward=_positions_from_mask,
                conventions=LLAMA,
            )
        ],
    )


@pytest.mark.spec("11.7", "11.1")
def test_positions_from_the_mask_pass_oracle_lengths() -> None:
    """A correct decoder that derives its position ids from the mask places its pad rows at
    position 1, the oracle's default at 0 .. L-1: only the padded query rows differ, and
    §11.7 promises nothing there (it used to fail with ratio ~1e9 at a padded row)."""
    adapter = _cumsum_adapter("decoder_block")
    tck = Harness(adapter, subject(adapter, "decoder_block"), seed=0)
    test_decoder.test_oracle_lengths(tck)
    assert tck.record.calls[-1]["what"] == "right-padded rows of lengths 13 and 7"
    assert tck.record.calls[-1]["passed"]


@pytest.mark.spec("4.2", "11.7")
def test_a_failure_at_a_padded_position_says_so() -> None:
    """An encoder layer wrong only at its padded query rows (zeroed, undeclared): the
    message names the worst index as padded."""
    from tck.adapters.reference import entry
    from tck.reference import canonical_conventions

    base = entry("encoder_layer", canonical_conventions("encoder_layer"))

    def zeroed(m, x, key_padding=None, causal=False):
        out = base.forward(m, x, key_padding=key_padding, causal=causal)
        return out if key_padding is None else out * key_padding[..., None]

    adapter = TorchModuleAdapter(
        "verdicts.pads_zeroed",
        [dataclasses.replace(base, forward=zeroed, name="encoder_layer")],
    )
    tck = Harness(adapter, subject(adapter, "encoder_layer"), seed=0)
    inst = tck.instance()
    inputs = tck.inputs(inst, Shape(batch=2, lq=6, lk=6, lengths=(6, 3)))
    with pytest.raises(CheckFailure) as failed:
        tck.assert_matches_oracle(inst, inputs)
    assert "is a PADDED position (key_padding False at batch row 1" in failed.value.message


# ------------------------------------------------- float64 bounds scale with the values


@pytest.mark.spec("10.7", "10.8")
@pytest.mark.parametrize("magnitude", [1.0, 1e3, 1e5])
def test_float64_gradient_bound_scales_with_the_values(magnitude: float) -> None:
    """torch.nn's encoder layer against float64 autograd through the reference, on inputs
    of growing magnitude: correct, so every gradient passes (a gradient that is 0 in the
    oracle used to fail by up to 2.4e5x a floor scaled by the gradient alone), while a
    gradient off by 1e-3 relative still fails at every magnitude (at 1e5 the floor is
    8e-5 against gradients of ~2: the price of inputs that large)."""
    from tck.conformance.toolkit import careful
    from tck.reference.tolerance import gradient_scale

    adapter = load_adapter("torch.nn")
    tck = Harness(adapter, subject(adapter, "encoder_layer"), seed=0)
    inst = tck.instance()
    inputs = tck.inputs(inst, Shape(magnitude=magnitude), seed=4)
    cotangent = np.random.default_rng(5).standard_normal(tck.gold(inst, inputs).shape)
    test = careful.gradients(tck, inst, inputs, cotangent)
    gold = careful.gold_gradients(tck, inst, inputs, cotangent)
    for name in gold:
        scale = gradient_scale(gold[name], inputs, cotangent)
        assert compare(test[name], gold[name], scale=scale).passed, name
    name = "params.ffn.fc1.weight"
    off = test[name] + 1e-3 * np.abs(gold[name]).max()
    assert not compare(off, gold[name], scale=gradient_scale(gold[name], inputs, cotangent)).passed


@pytest.mark.spec("10.11", "10.9")
def test_subjects_of_another_device_are_not_unverified_under_export() -> None:
    """torch.nn's CUDA-pinned attention backends skip on a CPU run, exported or not: they
    are not in this run, so they do not make it red (the ONNX wrapper names no devices:
    the subject an exported one comes from decides)."""
    pytest.importorskip("onnxruntime")
    from tck.adapters.onnx_runtime import with_onnx
    from tck.conformance.runner.plugin import _runs_here

    base = load_adapter("torch.nn")
    wrapped = with_onnx(base)
    subjects = {s.name: s for s in wrapped.subjects()}
    for name in ("mha[flash]", "mha[flash]@ort.enable_all", "mha[flash]@ort.disable_all"):
        assert not _runs_here(wrapped, subjects[name], "cpu"), name
    for name in ("mha", "mha@ort.enable_all"):
        assert _runs_here(wrapped, subjects[name], "cpu"), name
    assert not _runs_here(base, subject(base, "mha[flash]"), "cpu")
