"""The tck command, run as a user runs it: a subprocess, a results folder, an exit status."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from spec.test_spec_traceability import NOT_CHECKABLE, spec_clauses
from support.hf_checkpoints import save_bert

from tck.adapters import AdapterError, load_adapter
from tck.cli import main

SCHEMA_KEYS = {"schema", "adapter", "environment", "summary", "results"}
# Clauses whose checks run only with tck run --export onnx (tests/onnx_checks/test_onnx.py
# runs them).
EXPORT_ONLY = {"10.9": "export to ONNX"}
RESULT_KEYS = {"check", "clause", "component", "status", "diagnosis", "metrics", "repro"}


def tck(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tck", *args], capture_output=True, text=True, cwd=cwd, timeout=600
    )


@pytest.fixture(scope="module", params=["reference", "torch.nn"])
def run(request, tmp_path_factory) -> tuple[str, subprocess.CompletedProcess, dict]:
    out = tmp_path_factory.mktemp(request.param.replace(".", "_"))
    proc = tck("run", "--adapter", request.param, "--profile", "ci", "--out", str(out))
    document = json.loads((out / "results.json").read_text())
    return request.param, proc, document


@pytest.mark.spec("0.3")
def test_a_correct_adapter_runs_clean(run):
    name, proc, document = run
    bad = [
        f"{r['check']}[{r['subject']}]: {r['diagnosis']}"
        for r in document["results"]
        if r["status"] in ("fail", "error")
    ]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not bad
    assert document["summary"]["failed"] == document["summary"]["errors"] == 0
    assert f"tck {name}:" in proc.stdout and "0 failed, 0 errors" in proc.stdout


def test_results_json_schema(run):
    name, _, document = run
    assert SCHEMA_KEYS <= set(document)
    assert document["schema"] == 1 and document["adapter"]["name"] == name
    assert {"python", "torch", "numpy", "device"} <= set(document["environment"])
    summary_keys = {"passed", "failed", "skipped", "errors", "conventions", "unverified"}
    assert set(document["summary"]) == summary_keys
    statuses = {"pass", "fail", "skip", "error", "convention", "unverified"}
    for result in document["results"]:
        assert RESULT_KEYS <= set(result)
        assert result["status"] in statuses
        assert {"code", "message"} == set(result["diagnosis"])
    counted = sum(document["summary"].values())
    assert counted == len(document["results"])


def test_every_component_and_clause_is_covered(run):
    name, _, document = run
    offered = {s.component for s in load_adapter(name).subjects()}
    checked = {r["component"] for r in document["results"] if r["status"] != "skip"}
    assert offered == checked
    if name == "reference":  # offers every component: every checkable clause has a result
        clauses = {c for r in document["results"] if r["status"] != "skip" for c in r["clause"]}
        missing = set(spec_clauses()) - set(NOT_CHECKABLE) - set(EXPORT_ONLY) - clauses
        assert not missing, sorted(missing)


def test_declared_deviations_are_conventions_in_plain_words(run):
    name, _, document = run
    conventions = [r for r in document["results"] if r["status"] == "convention"]
    assert conventions
    for result in conventions:
        assert result["diagnosis"]["message"].startswith("It ")
    if name == "torch.nn":
        by_subject = {
            r["subject"]: r["diagnosis"]["message"]
            for r in conventions
            if r["check"] == "fingerprint.fully_masked_rows"
        }
        assert "returns NaN" in by_subject["mha[need_weights]"]
        assert "attention" not in by_subject  # F.scaled_dot_product_attention: zeros, canonical
        fast_path = [r for r in conventions if r["subject"] == "encoder_layer"]
        assert fast_path and "NaN" in fast_path[0]["diagnosis"]["message"]
        assert any("fast path" in note for note in fast_path[0]["notes"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--adapter", "no_such_adapter"], "unknown adapter 'no_such_adapter'"),
        (["run", "--adapter", "no_such_module:thing"], "cannot import 'no_such_module'"),
        (["run", "--adapter", "json:dumps"], "that failed: TypeError"),
        (["run", "--adapter", "json:decoder"], "not an adapter"),
        (["run", "--only", "mlp"], "unknown component(s) mlp"),
        (["run", "--profile", "nightly"], "invalid choice: 'nightly'"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_unwritable_out_is_a_usage_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["run", "--out", str(blocker / "sub")]) == 2
    assert "cannot write to --out" in capsys.readouterr().err


def test_list_names_every_builtin_adapter_with_its_components(capsys):
    assert main(["list"]) == 0
    lines = dict(line.split("\t") for line in capsys.readouterr().out.strip().splitlines())
    assert "mha" in lines["torch.nn"].split() and "vit" in lines["reference"].split()


def test_the_checks_run_as_plain_pytest(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "tck.conformance",
            "--tck-adapter=torch.nn",
            "--tck-only=layer_norm",
            f"--tck-out={tmp_path}",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    document = json.loads((tmp_path / "results.json").read_text())
    assert {r["component"] for r in document["results"]} == {"layer_norm"}


def test_the_summary_names_conventions_skip_reasons_and_a_next_step(run):
    name, proc, document = run
    out = proc.stdout
    conventions = [r for r in document["results"] if r["status"] == "convention"]
    assert conventions, f"{name} declares conventions: the run shows them"
    for r in conventions:  # each by field, declared value and subject
        metrics = r["metrics"]  # a convention row that is not a probe names it by its code
        field = metrics.get("field") or r["diagnosis"]["code"].split(".", 1)[-1]
        declared = document["adapter"]["deviations"][r["subject"]][field][1]
        assert f"{field} = {metrics.get('declared', declared)!r}" in out, (r["check"], out[-2000:])
        assert r["subject"] in out
    skipped = document["summary"]["skipped"]
    assert f"{skipped} skipped, by reason" in out
    reasons = [line for line in out.splitlines() if line.startswith("  ") and "  " in line[2:8]]
    assert reasons, "each skip reason on its own line, with its count"
    assert out.strip().splitlines()[-1].startswith("Next: check your own model")


def test_the_progress_bar_counts_the_rows_a_run_reports():
    """pytest's placeholder item for a check no subject takes ([NOTSET]) gives no result row,
    so the bar does not count it either."""
    import io

    from rich.console import Console

    from tck.conformance.runner.console import ProgressPlugin

    bar = ProgressPlugin(Console(file=io.StringIO()))
    ids = ["m.py::test_a[reference:mha]", "m.py::test_b[NOTSET]", "m.py::test_c[reference:ffn]"]
    bar.pytest_xdist_node_collection_finished(None, ids)
    assert bar.progress.tasks[0].total == 2
    bar.pytest_sessionfinish()


def test_tck_run_hands_the_model_to_its_workers_as_options(tmp_path, capsys):
    """--model reaches the adapter factory in the worker process (-n 1) as the plugin's
    --tck-model option: the run is green, and the environment of the calling process is
    the same before and after."""
    model, out = tmp_path / "model", tmp_path / "out"
    pytest.importorskip("transformers")
    save_bert(
        model,
        vocab_size=40,
        num_attention_heads=2,
        intermediate_size=24,
        max_position_embeddings=16,
    )
    before = dict(os.environ)
    code = main(["run", "--model", str(model), "--only", "embedding", "-n", "1", "--out", str(out)])
    assert code == 0, capsys.readouterr().err[-2000:]
    assert dict(os.environ) == before
    document = json.loads((out / "results.json").read_text())
    assert document["adapter"]["name"] == "hf.bert:model"
    assert document["summary"]["passed"] > 0 and document["summary"]["errors"] == 0


def test_a_repro_snippet_passes_the_model_on():
    """A failure's snippet reruns with the same model, component and map (load_adapter's
    arguments, or the plugin's options), not with whatever the environment holds."""
    from tck.conformance.runner import repro

    target = {"model": "/models/bert", "component": None, "map_path": "/maps/m.json"}
    snippet = repro.pytest_snippet(
        adapter_spec="tck.adapters.pretrained:auto",
        target=target,
        seed=3,
        module="mha",
        test_id="test_x[s]",
        title="t",
    )
    assert "'--tck-model=/models/bert'" in snippet and "'--tck-map=/maps/m.json'" in snippet
    assert "--tck-component" not in snippet


@pytest.mark.parametrize(
    ("spec", "given", "message"),
    [
        ("reference", {"component": "mha"}, "apply to an nn.Module instance"),
        ("reference", {"map_path": "m.json"}, "apply to an nn.Module instance"),
        ("reference", {"model": "DIR"}, "--model applies to an adapter factory"),
        ("tck.adapters.pretrained:bert", {"model": "no/such/dir"}, "save_pretrained folder"),
        ("onnx:model.onnx", {}, "needs --component"),
        ("onnx:model.onnx", {"component": "mha", "model": "DIR"}, "--model does not apply"),
    ],
)
def test_load_adapter_takes_model_component_and_map_as_arguments(spec, given, message):
    """What points an adapter at a given model comes as load_adapter's arguments, and
    arguments that do not apply to the adapter named are refused in one line."""
    with pytest.raises(AdapterError, match=re.escape(message)):
        load_adapter(spec, **given)


@pytest.mark.parametrize("family", ["bert", "llama", "auto"])
def test_a_checkpoint_without_transformers_says_how_to_install_it(tmp_path, monkeypatch, family):
    """--model on a folder that is one, where transformers cannot be imported: one line
    with the install command (a wrong path is said first: the test above)."""
    from tck.usage import INSTALL

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (tmp_path / "model.safetensors").write_bytes(b"\0")
    import tck.adapters

    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails
    for name in [m for m in sys.modules if m.startswith("tck.adapters.hf")]:
        monkeypatch.delitem(sys.modules, name)  # and so do the hf adapters, imported anew
        monkeypatch.delattr(tck.adapters, name.rpartition(".")[2], raising=False)
    with pytest.raises(AdapterError, match=re.escape(INSTALL["hf"])):
        load_adapter(f"tck.adapters.pretrained:{family}", model=str(tmp_path))
