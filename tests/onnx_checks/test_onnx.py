"""ONNX export (SPEC.md §10.9): the ORT path of the checks, the export checks, the known
divergences they must report, and ``tck export-onnx``. Needs the onnx extra (tox -e onnx)."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from tck.adapters.onnx_runtime import _float32_rounded, dynamic_axes

TESTS = Path(__file__).resolve().parents[1]  # tests/: support.* imports from here


def test_dynamic_axes_by_input_name():
    assert dynamic_axes("x", (2, 5, 24)) == [0, 1]
    assert dynamic_axes("x", (2, 4, 5, 6)) == [0, 2]  # rope's [B, H, L, d]
    assert dynamic_axes("q", (2, 4, 5, 6), kinds=("seq",)) == [2]
    assert dynamic_axes("keep_mask", (2, 1, 1, 7)) == [0, 3]  # size-1 axes broadcast
    assert dynamic_axes("keep_mask", (5, 7)) == [0, 1]
    assert dynamic_axes("images", (2, 3, 8, 8)) == [0]
    assert dynamic_axes("x", (1, 5, 24)) == [1]  # a size-1 batch exports as a broadcast
    assert dynamic_axes("x", (2, 5, 24), kinds=()) == []


def test_float32_rounded_constants_are_recognised():
    scale = 1 / np.sqrt(6)
    assert _float32_rounded(float(np.float32(scale)))  # 0.40824830532073975
    assert not _float32_rounded(float(scale))  # the float64 value itself
    for exact in (0.0, 1.0, 0.5, -0.125, float("-inf"), float("nan")):
        assert not _float32_rounded(exact)


onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed (tox -e onnx)")
pytest.importorskip("onnxruntime", reason="the onnx extra is not installed (tox -e onnx)")
pytest.importorskip("onnxscript", reason="the onnx extra is not installed (tox -e onnx)")


def tck(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tck", *args], capture_output=True, text=True, cwd=cwd, timeout=900
    )


def run_checks(
    adapter: str, out: Path, *extra: str, cwd: Path | None = None, env: dict | None = None
) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "--pyargs",
            "tck.conformance",
            f"--tck-adapter={adapter}",
            "--tck-export=onnx",
            "--tck-profile=ci",
            f"--tck-out={out}",
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=900,
        env=None if env is None else {**os.environ, **env},
    )
    assert (out / "results.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "results.json").read_text())


def by_key(document: dict) -> dict[tuple, dict]:
    return {
        (r["check"], r["subject"], r["metrics"].get("dtype"), r["metrics"].get("opset")): r
        for r in document["results"]
    }


@pytest.fixture(scope="module")
def sdpa(tmp_path_factory) -> dict:
    """torch.nn's attention (F.scaled_dot_product_attention, boolean mask), exported."""
    out = tmp_path_factory.mktemp("sdpa")
    return run_checks(
        "torch.nn",
        out,
        "--tck-only=attention",
        "-k",
        "opset or fully_masked or opt_levels or oracle",
    )


@pytest.mark.spec("10.9", "4.4")
def test_sdpa_fully_masked_row_is_the_mean_of_v_at_the_default_opset(sdpa):
    """torch 2.13 + onnxruntime 1.31: the default-opset graph returns the mean of V for a
    query with no key, where torch returns zeros; the suite names it on the ORT path."""
    results = by_key(sdpa)
    torch_row = results[("masks.fully_masked_rows", "attention", None, None)]
    assert torch_row["status"] == "pass"
    assert torch_row["metrics"]["runtime"] == "torch"
    ort_row = results[("masks.fully_masked_rows", "attention@ort.disable_all", None, 20)]
    assert ort_row["status"] == "fail"
    assert ort_row["diagnosis"]["code"] == "mask.fully_masked_rows_uniform"
    assert ort_row["metrics"]["runtime"] == "onnxruntime"
    assert ort_row["metrics"]["ort_opt_level"] == "ORT_DISABLE_ALL"
    in_float32 = results[("numerics.fully_masked_rows", "attention@ort.disable_all", "float32", 20)]
    assert in_float32["diagnosis"]["code"] == "mask.fully_masked_rows_uniform"
    # in float16 the row's finite fill cancels in softmax: it attends every key, unmasked. On
    # a row whose every key is hidden, the mask ignored and the mask added as a bias (the same
    # constant on every key) give the same output: the simpler account is named
    in_float16 = results[("numerics.fully_masked_rows", "attention@ort.disable_all", "float16", 20)]
    assert in_float16["diagnosis"]["code"] == "mask.ignored"
    opset20 = results[("onnx.opset", "attention@ort.enable_all", None, 20)]
    assert opset20["diagnosis"]["code"] == "mask.fully_masked_rows_uniform"
    assert opset20["metrics"]["graph_ops"].get("Attention") is None


@pytest.mark.spec("10.9", "4.4")
def test_sdpa_exports_to_the_attention_op_at_opset_23(sdpa):
    """Opset 23 has an Attention op; in float64 ONNX Runtime's kernel gives NaN for a query
    with no key, and computes in float32 inside: the suite names both."""
    row = by_key(sdpa)[("onnx.opset", "attention@ort.enable_all", None, 23)]
    assert row["metrics"]["graph_ops"] == {"Attention": 1}
    assert row["status"] == "fail"
    assert row["diagnosis"]["code"] == "mask.fully_masked_rows_nan"
    assert "computes in float32 inside (the graph runs Attention)" in row["diagnosis"]["message"]


@pytest.mark.spec("10.9", "10.7")
def test_enable_all_fuses_the_scale_into_a_float32_attribute(sdpa):
    results = by_key(sdpa)
    levels = results[("onnx.opt_levels", "attention@ort.enable_all", None, 20)]
    assert levels["status"] == "fail"
    assert levels["diagnosis"]["code"] == "onnx.opt_level_changes_result"
    assert "FusedMatMul.alpha" in levels["diagnosis"]["message"]
    oracle = results[("equality.oracle", "attention@ort.enable_all", None, 20)]
    assert oracle["diagnosis"]["code"] == "numerics.float64_precision_lost"
    assert results[("equality.oracle", "attention@ort.disable_all", None, 20)]["status"] == "pass"


# What the exported float64 reference graphs break, found by these checks (torch 2.13,
# onnx 1.23, onnxruntime 1.31): the LayerNorm eps, a Python float, stored rounded to float32;
# ONNX Gather takes id -1 as the last row where torch raises.
KNOWN = {
    "layer_norm": {"numerics.float64_precision_lost"},
    "embedding": {"shape.accepts_out_of_range_ids"},
}


@pytest.mark.spec("10.9", "0.3")
def test_exported_reference_components(tmp_path):
    """Zero false failures: on torch every check passes; on the exported graphs only the
    known export defects fail, each with its diagnosis, and faithful exports pass."""
    document = run_checks(
        "reference", tmp_path, "--tck-only=layer_norm,ffn,embedding,sinusoidal_pe,rope"
    )
    bad = {}
    for r in document["results"]:
        if r["status"] in ("fail", "error"):
            bad.setdefault(r["subject"], set()).add(r["diagnosis"]["code"])
    assert all("@ort." in subject for subject in bad), bad
    for subject, codes in bad.items():
        assert codes <= KNOWN.get(subject.split("@")[0].split("[")[0], set()), (subject, codes)
    assert {s.split("@")[0] for s in bad} >= {"layer_norm", "embedding"}
    eps = next(
        r for r in document["results"]
        if r["subject"] == "layer_norm@ort.disable_all" and r["status"] == "fail"
    )  # fmt: skip
    assert "9.999999747378752e-06" in eps["diagnosis"]["message"]  # 1e-5 as a float32
    runtimes = {r["metrics"].get("ort_opt_level", "torch") for r in document["results"]}
    assert runtimes == {"torch", "ORT_DISABLE_ALL", "ORT_ENABLE_ALL"}
    opsets = {r["metrics"]["opset"] for r in document["results"] if r["check"] == "onnx.opset"}
    assert opsets == {17, 18, 20, 23}


@pytest.mark.spec("10.9")
@pytest.mark.parametrize(
    ("adapter", "code"),
    [("data_dependent", "onnx.export_failed"), ("fixed_batch", "onnx.axis_not_dynamic")],
)
def test_broken_exports_are_named(tmp_path, adapter, code):
    document = run_checks(
        f"support.onnx_adapters:{adapter}", tmp_path, "-k", "oracle or dynamic", cwd=TESTS
    )
    results = by_key(document)
    assert results[("equality.oracle", "layer_norm", None, None)]["status"] == "pass"
    exported = [r for r in document["results"] if "@ort." in r["subject"]]
    failed = [r for r in exported if r["status"] != "skip"]
    assert failed and all(r["diagnosis"]["code"] == code for r in failed)
    if code == "onnx.export_failed":  # one row per subject; the checks that needed its
        # graph skip, citing it
        assert sorted(r["subject"] for r in failed) == sorted({r["subject"] for r in exported})
    assert all(code in r["diagnosis"]["message"] for r in exported if r["status"] == "skip")
    dynamic = results[("onnx.dynamic_axes", "layer_norm@ort.enable_all", None, 20)]
    assert dynamic["status"] == "fail"


@pytest.mark.spec("10.9", "4.4")
def test_float_mask_fully_masked_row_is_nan_after_export(tmp_path):
    """An additive -inf float mask: torch gives zeros for a row with no key, the exported
    graph NaN."""
    document = run_checks(
        "support.onnx_adapters:float_mask", tmp_path, "-k", "masks and fully_masked", cwd=TESTS
    )
    results = by_key(document)
    assert results[("masks.fully_masked_rows", "attention", None, None)]["status"] == "pass"
    exported = results[("masks.fully_masked_rows", "attention@ort.disable_all", None, 20)]
    assert exported["diagnosis"]["code"] == "mask.fully_masked_rows_nan"


@pytest.mark.parametrize("component", ["seq2seq", "vit"])
def test_export_onnx_command(tmp_path, component):
    path = tmp_path / f"{component}.onnx"
    proc = tck(
        "export-onnx", "--adapter", "reference", "--component", component, "--out", str(path)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "onnx.checker full_check: passed" in proc.stdout
    assert "max |delta|" in proc.stdout
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    batch = model.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch.dim_param, "the batch axis is dynamic"


def test_export_onnx_opset_23_static(tmp_path):
    path = tmp_path / "layer_norm.onnx"
    proc = tck(
        "export-onnx", "--adapter", "torch.nn", "--component", "layer_norm", "--out", str(path),
        "--opset", "23", "--dynamic", "none",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "opset   23" in proc.stdout and "LayerNormalization" in proc.stdout
    dims = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim
    assert all(not d.dim_param for d in dims)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--component", "vit", "--out", "x.txt"], "ending in .onnx"),
        (["--component", "vit", "--out", "m.onnx", "--dynamic", "heads"], "unknown axis kind"),
        (["--component", "vit", "--out", "no/such/m.onnx"], "does not exist"),
        (["--component", "mha", "--subject", "nope", "--out", "m.onnx"], "no subject 'nope'"),
    ],
)
def test_export_onnx_usage_errors(tmp_path, args, message):
    proc = tck("export-onnx", "--adapter", "reference", *args, cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_run_opset_needs_export(tmp_path):
    proc = tck("run", "--adapter", "reference", "--opset", "23", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert "--export onnx" in proc.stderr


def test_report_shows_original_and_exported_side_by_side(sdpa, tmp_path):
    from tck.reports.html import exported_rows, render_report

    rows = exported_rows(sdpa)
    masked = next(r for r in rows if r["check"] == "masks.fully_masked_rows" and not r["dtype"])
    assert masked["cells"]["torch"]["status"] == "pass"
    assert masked["cells"]["ORT_DISABLE_ALL"]["status"] == "fail"
    assert masked["differs"]
    from tck.reports.junit import junit_xml

    names = [case.get("name") for case in ET.fromstring(junit_xml(sdpa)).iter("testcase")]
    assert len(names) == len(set(names)), "JUnit case names are unique (opsets included)"
    html = render_report(sdpa)
    assert 'id="exported-differing"' in html and "mask.fully_masked_rows_uniform" in html


def test_repro_of_an_exported_subject_replays_the_failure(sdpa, tmp_path):
    """The repro builds the exported subject (with_onnx), not the torch one."""
    row = by_key(sdpa)[("equality.oracle", "attention@ort.enable_all", None, 20)]
    assert "with_onnx(adapter, opset=None)" in row["repro"]
    script = tmp_path / "repro.py"
    script.write_text(row["repro"])
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert proc.returncode == 1 and "max |test - oracle|" in proc.stderr, proc.stderr[-2000:]
    opset = by_key(sdpa)[("onnx.opset", "attention@ort.enable_all", None, 23)]
    assert "--tck-export=onnx" in opset["repro"]  # export checks rerun through pytest


# ---------------------------------------------------------------- one export per structure


def _built(adapter, name: str, seed: int):
    """``name`` of ``adapter`` built and given canonical parameters of ``seed``, and inputs."""
    from tck.conformance.toolkit.harness import DEFAULT_CONFIG
    from tck.reference import init_params
    from tck.reference.inputs import Shape, make_inputs

    subject = next(s for s in adapter.subjects() if s.name == name)
    handle = adapter.build(subject, DEFAULT_CONFIG, seed=seed)
    params = init_params(subject.component, DEFAULT_CONFIG, subject.conventions, seed=seed)
    adapter.load(handle, params)
    inputs = make_inputs(subject.component, DEFAULT_CONFIG, np.random.default_rng(seed), Shape())
    return handle, inputs


def _stats_after(run) -> dict:
    from tck.adapters.onnx_runtime import STATS

    before = dict(STATS)
    run()
    return {k: STATS[k] - before[k] for k in STATS if STATS[k] != before[k]}


@pytest.mark.parametrize(
    ("adapter", "name"),
    [
        ("torch.nn", "mha@ort.disable_all"),  # the exporter folds in_proj_weight's slices
        ("torch.nn", "layer_norm@ort.enable_all"),
        ("reference", "ffn@ort.disable_all"),
    ],
)
def test_a_structure_is_exported_once_and_takes_each_parameter_set(adapter, name):
    """The second parameter set's graph is the first export with its initialisers swapped
    and optimised: the very model torch.onnx.export gives for those parameters (compared as
    bytes, in one process), and it computes with them (outputs of the two sets differ)."""
    from tck.adapters import load_adapter
    from tck.adapters.onnx_runtime import clear_caches, export, with_onnx

    ort = with_onnx(load_adapter(adapter), reuse=True)
    clear_caches()
    outputs = []

    def two_parameter_sets():
        for seed in (11, 12):
            handle, inputs = _built(ort, name, seed)
            outputs.append(ort.run(handle, inputs))
            fresh = export(handle.torch, ort.base._kwargs(handle.torch, inputs))
            assert handle.last.model.SerializeToString() == fresh.SerializeToString(), seed

    assert _stats_after(two_parameter_sets) == {"exported": 1, "swapped": 1}
    assert not np.array_equal(outputs[0], outputs[1])


@pytest.mark.parametrize(
    ("adapter", "name"),
    [
        ("torch.nn", "mha@ort.disable_all"),
        ("torch.nn", "encoder_layer@ort.enable_all"),
        ("reference", "decoder_layer@ort.disable_all"),
    ],
)
def test_a_template_serves_other_sizes_where_the_program_keeps_them_symbolic(adapter, name):
    """A parameter set first called at other sizes than the template's (batch 3, lengths
    9 and 4) takes the template, resized: its graph computes what a fresh export at those
    sizes computes, and the recorded export sizes stay the template's (for
    onnx.axis_not_dynamic)."""
    from tck.adapters import load_adapter
    from tck.adapters.onnx_runtime import Exported, clear_caches, export, run_graph, with_onnx
    from tck.conformance.toolkit.harness import DEFAULT_CONFIG
    from tck.reference.inputs import Shape, make_inputs

    ort = with_onnx(load_adapter(adapter), reuse=True)
    clear_caches()
    level = name.partition("@ort.")[2]

    def two_parameter_sets():
        for seed, shape in ((11, Shape()), (12, Shape(batch=3, lq=9, lk=4))):
            handle, _ = _built(ort, name, seed)
            component = handle.torch.subject.component
            inputs = make_inputs(component, DEFAULT_CONFIG, np.random.default_rng(seed), shape)
            out = ort.run(handle, inputs)
            kwargs = ort.base._kwargs(handle.torch, inputs)
            fresh = run_graph(Exported.of(export(handle.torch, kwargs), kwargs), level, kwargs)
            np.testing.assert_array_equal(out, fresh)
            first = next(n for n, v in kwargs.items() if hasattr(v, "shape"))
            assert handle.last.shapes[first][0] == 2  # the template's batch: traced there

    assert _stats_after(two_parameter_sets) == {"exported": 1, "resized": 1}


def test_exports_share_one_registry_per_opset_and_give_the_same_graph(monkeypatch):
    """torchlib's registry is built once per opset (adapters/onnx_runtime.py
    _shared_registry); an export with it is the export without it, byte for byte."""
    import contextlib

    from tck.adapters import load_adapter
    from tck.adapters import onnx_runtime as onnx_rt

    ort = onnx_rt.with_onnx(load_adapter("torch.nn"), reuse=True)
    handle, inputs = _built(ort, "layer_norm@ort.disable_all", 11)
    kwargs = ort.base._kwargs(handle.torch, inputs)
    shared = [onnx_rt.export(handle.torch, kwargs, opset=18) for _ in range(2)]
    built = [k for k in onnx_rt._REGISTRIES if dict(k[2]).get("opset_version", k[1][:1]) == 18]
    assert len(built) == 1, list(onnx_rt._REGISTRIES)
    monkeypatch.setattr(onnx_rt, "_shared_registry", contextlib.nullcontext)
    own = onnx_rt.export(handle.torch, kwargs, opset=18)
    assert shared[0].SerializeToString() == shared[1].SerializeToString()
    assert shared[0].SerializeToString() == own.SerializeToString()


def test_a_parameter_without_initialiser_is_exported_afresh():
    """A module tensor no initialiser holds (export dropped an unused parameter): the swap
    cannot be checked, so each parameter set is exported as before."""
    sys.path.insert(0, str(TESTS))
    try:
        from support.onnx_adapters import unused_parameter
    finally:
        sys.path.remove(str(TESTS))
    from tck.adapters.onnx_runtime import clear_caches, with_onnx

    ort = with_onnx(unused_parameter, reuse=True)
    clear_caches()
    outputs = []

    def two_parameter_sets():
        for seed in (11, 12):
            handle, inputs = _built(ort, "layer_norm@ort.disable_all", seed)
            outputs.append(ort.run(handle, inputs))
            torch_out = ort.base.run(handle.torch, inputs)
            np.testing.assert_allclose(outputs[-1], torch_out, rtol=1e-12, atol=1e-12)

    assert _stats_after(two_parameter_sets) == {"exported": 1, "reexported": 1}


def test_a_failed_export_fails_again_without_tracing():
    sys.path.insert(0, str(TESTS))
    try:
        from support.onnx_adapters import data_dependent
    finally:
        sys.path.remove(str(TESTS))
    from tck.adapters import AdapterFailure
    from tck.adapters.onnx_runtime import clear_caches, with_onnx

    ort = with_onnx(data_dependent, reuse=True)
    clear_caches()
    codes = []

    def two_parameter_sets():
        for seed in (11, 12):
            handle, inputs = _built(ort, "layer_norm@ort.enable_all", seed)
            with pytest.raises(AdapterFailure) as failure:
                ort.run(handle, inputs)
            codes.append(failure.value.code)

    assert _stats_after(two_parameter_sets) == {"failed_cached": 1}
    assert codes == ["onnx.export_failed"] * 2


def _verdicts(document: dict) -> list[tuple]:
    """(check, subject, dtype, opset, status, diagnosis code) of every result, sorted."""
    return sorted(
        (
            r["check"],
            r["subject"],
            str(r["metrics"].get("dtype")),
            str(r["metrics"].get("opset")),
            r["status"],
            str((r.get("diagnosis") or {}).get("code")),
        )
        for r in document["results"]
    )


@pytest.mark.parametrize(
    ("adapter", "only", "checks"),
    [
        ("torch.nn", "mha,layer_norm", "oracle or dynamic_axes"),
        ("reference", "ffn", "oracle or dynamic_axes"),
    ],
)
def test_templates_keep_the_verdicts_of_fresh_exports(tmp_path, adapter, only, checks):
    """The same checks, once with templates (the default) and once exporting every
    parameter set afresh (TCK_ONNX_REEXPORT=1, as before templates): the same status and
    diagnosis code for every check, subject, dtype and opset."""
    args = (f"--tck-only={only}", "-k", checks)
    reused = run_checks(adapter, tmp_path / "reused", *args)
    fresh = run_checks(adapter, tmp_path / "fresh", *args, env={"TCK_ONNX_REEXPORT": "1"})
    assert any("@ort." in row[1] and row[4] == "pass" for row in _verdicts(reused))
    assert _verdicts(reused) == _verdicts(fresh)


def test_a_template_serves_calls_of_its_own_sizes():
    """Export may bake a size into a graph whose inputs look dynamic (fixed_batch: a
    Reshape to batch * length rows): a parameter set first called at other sizes gets an
    export of its own, as before templates; one called at the template's sizes swaps."""
    sys.path.insert(0, str(TESTS))
    try:
        from support.onnx_adapters import fixed_batch
    finally:
        sys.path.remove(str(TESTS))
    from tck.adapters.onnx_runtime import clear_caches, with_onnx
    from tck.conformance.toolkit.harness import DEFAULT_CONFIG
    from tck.reference.inputs import Shape, make_inputs

    ort = with_onnx(fixed_batch, reuse=True)
    clear_caches()

    def parameter_sets():
        for seed, shape in ((11, Shape()), (12, Shape(batch=3, lq=9)), (13, Shape())):
            handle, _ = _built(ort, "layer_norm@ort.disable_all", seed)
            inputs = make_inputs("layer_norm", DEFAULT_CONFIG, np.random.default_rng(seed), shape)
            out = ort.run(handle, inputs)
            torch_out = ort.base.run(handle.torch, inputs)
            np.testing.assert_allclose(out, torch_out, rtol=1e-12, atol=1e-12)

    assert _stats_after(parameter_sets) == {"exported": 2, "swapped": 1}
