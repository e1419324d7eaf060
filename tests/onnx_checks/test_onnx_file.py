"""An ONNX file checked from the file alone: ``tck run --adapter onnx:FILE
--component encoder_layer [--map MAP.json]``. Without a map the parameter-free checks run and
the oracle checks skip; with one, the oracle checks run on the graph's own initializers."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

pytestmark = pytest.mark.spec("0.2", "10.9")


def _export(folder: Path) -> tuple[Path, dict]:
    """A float64 encoder layer (the reference, post-LN, ReLU) exported to FILE, and the map a
    user would write for it: each canonical parameter -> the initializer holding it."""
    import onnx
    import torch
    from onnx import numpy_helper

    from tck.adapters.onnx_runtime import export
    from tck.adapters.reference import adapter
    from tck.conformance.toolkit.harness import DEFAULT_CONFIG
    from tck.reference import init_params

    # d_k = 16: the exporter stores the scale 1/sqrt(d_k) as a float32 constant (SPEC.md
    # §10.9), exact only when sqrt(d_k) is a power of two; this file is meant to conform
    config = dataclasses.replace(DEFAULT_CONFIG, d_model=32, n_heads=2)
    subject = next(s for s in adapter.subjects() if s.name == "encoder_layer")
    handle = adapter.build(subject, config, seed=0)
    params = init_params("encoder_layer", config, subject.conventions, seed=3)
    adapter.load(handle, params)
    x = torch.randn(2, 5, config.d_model, dtype=torch.float64)
    keep = torch.tensor([[True] * 5, [True, True, True, False, False]])
    model = export(handle, {"x": x, "key_padding": keep})
    path = folder / "layer.onnx"
    onnx.save(model, str(path))
    arrays = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    mapping: dict = {"params": {}, "config": {"n_heads": 2, "d_ff": config.d_ff}}
    for name, value in params.items():
        for init, array in arrays.items():
            if array.shape == value.shape and np.array_equal(array, value):
                mapping["params"][name] = init
                break
            if array.ndim == 2 and array.T.shape == value.shape and np.array_equal(array.T, value):
                mapping["params"][name] = {"name": init, "permute": [1, 0]}
                break
    assert set(mapping["params"]) == set(params), sorted(set(params) - set(mapping["params"]))
    return path, mapping


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tck", "run", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("onnx_file")
    path, mapping = _export(folder)
    (folder / "map.json").write_text(json.dumps(mapping))
    return path, folder / "map.json"


def _results(tmp_path: Path, args: list[str]) -> dict:
    out = tmp_path / "out"
    done = _run([*args, "-n", "0", "--out", str(out)], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "results.json").read_text())


def test_without_a_map_the_parameter_free_checks_run(exported, tmp_path) -> None:
    path, _ = exported
    document = _results(tmp_path, ["--adapter", f"onnx:{path}", "--component", "encoder_layer"])
    summary = document["summary"]
    assert summary["failed"] == 0 and summary["errors"] == 0, summary
    passed = {r["check"] for r in document["results"] if r["status"] == "pass"}
    assert {"masks.padding_invariance", "shapes.output_shapes"} & passed, passed
    assert any(c.startswith("determinism.") or "batch" in c for c in passed), passed
    skipped = {
        r["check"]: r["diagnosis"]["message"] for r in document["results"] if r["status"] == "skip"
    }
    assert "canonical parameters" in skipped.get("equality.oracle", ""), skipped


def test_with_a_map_the_oracle_checks_run(exported, tmp_path) -> None:
    path, mapping = exported
    args = ["--adapter", f"onnx:{path}", "--component", "encoder_layer", "--map", str(mapping)]
    document = _results(tmp_path, args)
    summary = document["summary"]
    assert summary["failed"] == 0 and summary["errors"] == 0, summary
    assert summary["unverified"] == 0, summary
    passed = {r["check"] for r in document["results"] if r["status"] == "pass"}
    assert {"equality.oracle", "params.round_trip", "params.count"} <= passed, passed


def test_onnx_usage_errors(exported, tmp_path) -> None:
    path, _ = exported
    bad_map = tmp_path / "bad.json"
    bad_map.write_text('{"params": {"self_attn.q.weight": "no_such_initializer"}}')
    for args, words in (
        (["--adapter", f"onnx:{path}"], "needs --component"),
        (["--adapter", f"onnx:{tmp_path / 'none.onnx'}", "--component", "mha"], "no ONNX file"),
        (["--adapter", f"onnx:{path}", "--component", "nope"], "is not a component"),
        (
            ["--adapter", f"onnx:{path}", "--component", "encoder_layer", "--map", str(bad_map)],
            "lacks",
        ),
        (["--adapter", "reference", "--component", "mha"], "apply to --adapter onnx"),
    ):
        done = _run(args, tmp_path)
        assert done.returncode == 2, done.stderr
        assert words in done.stderr and "Traceback" not in done.stderr, done.stderr
