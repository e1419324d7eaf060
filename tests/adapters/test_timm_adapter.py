"""timm.vit: with timm and a torchvision built for the installed torch (tox -e timm), the
whole suite runs with 0 failures and the fingerprint agrees with what the adapter declares;
without them, ``tck run --adapter timm.vit`` stops with one line saying why (exit 2).

torchvision from the package index cannot load beside the CPU torch 2.13.0 build the other
envs pin, so ``tox -e timm`` installs torch 2.14.1 and torchvision 0.29.1 with their own
constraints (constraints-timm.txt) and sets TCK_REQUIRE_TIMM=1: there a timm that does not
import fails the env instead of skipping it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli.test_fingerprint_cli import assert_agrees

from tck.cli import main
from tck.conformance.runner.fingerprint_cli import build_fingerprint


def tck(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tck", *args], capture_output=True, text=True, timeout=900
    )


def timm_import_error() -> str | None:
    """Why timm does not import here, or None when it does."""
    try:
        import timm  # noqa: F401
    except Exception as err:  # missing, or a torchvision built for another torch
        return f"{type(err).__name__}: {err}"
    return None


@pytest.fixture(scope="module")
def timm_available() -> None:
    why = timm_import_error()
    if why is None:
        return
    if os.environ.get("TCK_REQUIRE_TIMM"):
        pytest.fail(f"TCK_REQUIRE_TIMM is set but timm does not import: {why}")
    pytest.skip(f"timm (and a matching torchvision) not importable: {why}")


@pytest.mark.skipif(
    timm_import_error() is None, reason="timm imports here: test_timm_runs_with_no_failure"
)
def test_timm_unavailable_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that could check nothing stops (exit 2), naming the reason in one line."""
    proc = tck("run", "--adapter", "timm.vit", "--out", str(tmp_path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "timm.vit needs timm" in lines[0], proc.stderr
    assert "torchvision" in lines[0]
    assert main(["list"]) == 0
    assert "timm.vit\t(unavailable: " in capsys.readouterr().out


@pytest.mark.spec("0.3", "9.1", "9.4")
def test_timm_runs_with_no_failure(timm_available: None, tmp_path: Path) -> None:
    proc = tck("run", "--adapter", "timm.vit", "--out", str(tmp_path))
    document = json.loads((tmp_path / "results.json").read_text())
    bad = [
        f"{r['check']}[{r['subject']}]: {r['diagnosis']}"
        for r in document["results"]
        if r["status"] in ("fail", "error")
    ]
    assert proc.returncode == 0 and not bad, "\n".join(bad)
    summary = document["summary"]
    assert summary["passed"] > 100, summary  # the whole suite ran, not a handful of checks
    assert_agrees("timm.vit", build_fingerprint(document))


def _save_timm(folder: Path, **extra: object) -> None:
    """A small timm ViT, randomly initialised, saved as timm saves it (config.json naming the
    architecture and its model_args, model.safetensors)."""
    import timm
    import torch
    from timm.models import save_for_hf

    torch.manual_seed(0)
    model = timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=False,
        img_size=16,
        patch_size=4,
        embed_dim=40,  # not the suite's default d_model (24): the checkpoint's own
        depth=2,
        num_heads=5,
        mlp_ratio=1.8,
        num_classes=3,
        **extra,
    )
    save_for_hf(model, str(folder), safe_serialization=True)


def _digest(folder: Path) -> dict[str, str]:
    import hashlib

    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.spec("0.2", "0.5", "9.1")
def test_timm_checkpoint_as_it_is(timm_available: None, tmp_path: Path) -> None:
    """--model on a save_for_hf folder: 0 failures at the checkpoint's own width, its weights
    read and never written; a bare safetensors file with num_heads in its metadata too."""
    model = tmp_path / "vit"
    _save_timm(model)
    before = _digest(model)
    out = tmp_path / "out"
    proc = tck("run", "--adapter", "timm.vit", "--model", str(model), "-n", "0", "--out", str(out))
    assert _digest(model) == before  # read, never written
    document = json.loads((out / "results.json").read_text())
    bad = [
        f"{r['check']}[{r['subject']}]: {r['diagnosis']}"
        for r in document["results"]
        if r["status"] in ("fail", "error")
    ]
    assert proc.returncode == 0 and not bad, "\n".join(bad) + proc.stderr[-2000:]
    summary = document["summary"]
    assert summary["unverified"] == 0 and summary["passed"] > 100, summary
    notes = [n for ns in document["adapter"]["notes"].values() for n in ns]
    assert any("d_model=40" in n and "n_heads=5" in n for n in notes), notes
    oracle = next(
        r
        for r in document["results"]
        if (r["check"], r["subject"]) == ("equality.oracle", "encoder[fused]")
    )
    assert (
        oracle["status"] == "pass"
        and max(c["seq_len"] or 0 for c in oracle["metrics"]["calls"]) > 1
    )
    reasons = [r["diagnosis"]["message"] for r in document["results"] if r["status"] == "skip"]
    assert any("own weights" in m or "the subject fixes" in m for m in reasons), reasons[:5]

    # the same weights as one safetensors file, the heads in its metadata
    from safetensors.torch import load_file, save_file

    single = tmp_path / "weights.safetensors"
    save_file(load_file(str(model / "model.safetensors")), str(single), {"num_heads": "5"})
    out = tmp_path / "out-file"
    proc = tck(
        "run", "--adapter", "timm.vit", "--model", str(single), "-n", "0",
        "--only", "encoder_layer,vit", "--out", str(out),
    )  # fmt: skip
    summary = json.loads((out / "results.json").read_text())["summary"]
    assert proc.returncode == 0 and summary["failed"] == summary["errors"] == 0, summary


@pytest.mark.parametrize(
    "extra,words",
    [
        ({"init_values": 1e-5}, "ls1.gamma"),  # LayerScale: parameters the canonical ViT lacks
        ({"global_pool": "avg", "fc_norm": False}, "global_pool='avg'"),
    ],
)
def test_timm_checkpoint_not_canonical_is_one_line(
    timm_available: None, tmp_path: Path, extra: dict, words: str
) -> None:
    _save_timm(tmp_path / "vit", **extra)
    proc = tck("run", "--adapter", "timm.vit", "--model", str(tmp_path / "vit"), "--out",
               str(tmp_path / "out"))  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.spec("0.5")
def test_timm_qkv_bias_off_keeps_the_output_bias(timm_available: None) -> None:
    """VisionTransformer(qkv_bias=False): q, k, v without bias, proj with one
    (Config.attention_bias=False, attention_out_bias=True): the layout loads name for name
    and the output is the oracle's (float64: rounding only; a bias moves it by ~0.1); an
    output projection without bias is refused in words."""
    import dataclasses

    import numpy as np

    from tck.adapters import Unsupported, load_adapter
    from tck.conformance.toolkit.harness import DEFAULT_CONFIG
    from tck.reference import init_params
    from tck.reference.expected import expected
    from tck.reference.inputs import Shape, make_inputs

    adapter = load_adapter("timm.vit")
    subject = next(s for s in adapter.subjects() if s.name == "encoder_layer[unfused]")
    config = dataclasses.replace(DEFAULT_CONFIG, attention_bias=False, attention_out_bias=True)
    handle = adapter.build(subject, config, seed=0)
    params = init_params(subject.component, config, subject.conventions, seed=1)
    adapter.load(handle, params)
    inputs = make_inputs(subject.component, config, np.random.default_rng(2), Shape(lq=5, lk=5))
    gold = expected(subject.component, inputs, params, config, subject.conventions)
    np.testing.assert_allclose(adapter.run(handle, inputs), gold, rtol=1e-9, atol=1e-9)
    with pytest.raises(Unsupported, match="attention_out_bias"):
        adapter.build(subject, dataclasses.replace(config, attention_out_bias=False), seed=0)
