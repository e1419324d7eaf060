"""The third-party adapters: hf.bert and hf.vit run with 0 failures and their fingerprint
agrees with what they declare (tox -e hf, where transformers is installed). timm.vit is in
test_timm_adapter.py (tox -e timm)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli.test_fingerprint_cli import assert_agrees

from tck.adapters import Unsupported, load_adapter
from tck.conformance.runner.fingerprint_cli import build_fingerprint
from tck.conformance.toolkit.harness import DEFAULT_CONFIG
from tck.reference import Config

HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
needs_transformers = pytest.mark.skipif(
    not HAS_TRANSFORMERS, reason="transformers is not installed (tox -e hf installs it)"
)


def tck(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tck", *args], capture_output=True, text=True, timeout=600
    )


# ------------------------------------------------------------------------- whole runs


@pytest.fixture(scope="module", params=["hf.bert", "hf.vit"])
def hf_run(request, tmp_path_factory) -> tuple[str, subprocess.CompletedProcess, dict]:
    if not HAS_TRANSFORMERS:
        pytest.skip("transformers is not installed (tox -e hf installs it)")
    out = tmp_path_factory.mktemp(request.param.replace(".", "_"))
    proc = tck("run", "--adapter", request.param, "--out", str(out))
    document = json.loads((out / "results.json").read_text())
    return request.param, proc, document


def _conventions(document: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {
        (r["subject"], r["check"]): r["diagnosis"]["message"]
        for r in document["results"]
        if r["status"] == "convention"
    }


@pytest.mark.spec("0.3", "4.4", "5.1", "6.1", "7.1")
def test_hf_runs_with_no_failure(hf_run) -> None:
    name, proc, document = hf_run
    bad = [
        f"{r['check']}[{r['subject']}]: {r['diagnosis']}"
        for r in document["results"]
        if r["status"] in ("fail", "error")
    ]
    assert proc.returncode == 0 and not bad, "\n".join(bad) + proc.stderr[-2000:]
    passed = {(r["subject"], r["check"]) for r in document["results"] if r["status"] == "pass"}
    conventions = _conventions(document)
    for impl in ("eager", "sdpa"):
        if name == "hf.vit" and impl == "eager":
            continue  # float32 softmax: its float64 checks skip (test_vit_eager_...)
        layer = f"encoder_layer[{impl}]"
        assert (layer, "equality.oracle") in passed  # the parameter map is right
        assert (layer, "masks.polarity") in passed  # so is transformers' mask, as we pass it
        assert "eps = 1e-12" in conventions[(layer, "fingerprint.eps")]
        assert "exact GELU" in conventions[(layer, "fingerprint.activation")]
    if name == "hf.bert":
        rows = conventions[("encoder_layer[eager]", "fingerprint.fully_masked_rows")]
        assert "on these inputs it spreads a query whose keys are all masked evenly" in rows
        assert ("encoder_layer[sdpa]", "fingerprint.fully_masked_rows") in passed  # zeros
    else:
        assert "pre-LN" in conventions[("encoder_layer[sdpa]", "fingerprint.norm_placement")]
        assert ("vit[sdpa]", "equality.oracle") in passed
        assert ("vit[sdpa]", "vit.pooling") in passed


@pytest.mark.spec("0.3", "3.1", "4.1")
def test_hf_fingerprint_agrees_with_the_declaration(hf_run) -> None:
    """The probes of the run (the same checks tck fingerprint runs) agree with the adapter."""
    name, _, document = hf_run
    measured = assert_agrees(name, build_fingerprint(document))
    assert {"eps", "activation", "norm_placement", "attention_scale", "mask_polarity"} <= measured


@needs_transformers
@pytest.mark.spec("0.3")
def test_fingerprint_command_on_hf(tmp_path: Path) -> None:
    proc = tck("fingerprint", "--adapter", "hf.bert", "--only", "attention", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    document = json.loads((tmp_path / "fingerprint.json").read_text())
    eager = document["subjects"]["attention[eager]"]["properties"]
    assert eager["fully_masked_rows"]["declared"] == "undefined"
    assert eager["fully_masked_rows"]["shown"] == ["uniform"]
    assert eager["attention_scale"]["status"] == "agrees"


# ------------------------------------------------------------------ what the notes claim


def _subject(adapter: Any, name: str) -> Any:
    return next(s for s in adapter.subjects() if s.name == name)


@needs_transformers
@pytest.mark.spec("4.4")
def test_eager_fully_masked_rows_depend_on_the_dtype() -> None:
    """Why eager declares fully_masked_rows='undefined': the finfo.min fill gives the mean of
    V in float64 and NaN in float16 once every score is below -16 (it overflows to -inf)."""
    adapter = load_adapter("hf.bert")
    subject = _subject(adapter, "attention[eager]")
    c = DEFAULT_CONFIG
    k = np.full((1, c.n_heads, 3, c.head_dim_k), 3.0)
    v = np.random.default_rng(0).standard_normal((1, c.n_heads, 3, c.head_dim_v))
    inputs = {"q": -k[:, :, :2], "k": k, "v": v, "keep_mask": np.zeros((1, 1, 1, 3), bool)}
    exact = adapter.run(adapter.build(subject, c, seed=0), inputs)
    np.testing.assert_allclose(exact, np.broadcast_to(v.mean(axis=2, keepdims=True), exact.shape))
    half = adapter.run(adapter.build(subject, c, seed=0, dtype="float16"), inputs)
    assert np.isnan(half).all()


@needs_transformers
def test_vit_eager_skips_float64_with_the_reason() -> None:
    adapter = load_adapter("hf.vit")
    subject = _subject(adapter, "encoder_layer[eager]")
    with pytest.raises(Unsupported, match="softmax in float32"):
        adapter.build(subject, DEFAULT_CONFIG, seed=0)
    handle = adapter.build(subject, DEFAULT_CONFIG, seed=0, dtype="float32")
    x = np.random.default_rng(0).standard_normal((2, 5, DEFAULT_CONFIG.d_model))
    assert adapter.run(handle, {"x": x}).dtype == np.float32


@needs_transformers
@pytest.mark.parametrize("adapter_name", ["hf.bert", "hf.vit"])
def test_what_transformers_cannot_express_is_unsupported(adapter_name: str) -> None:
    adapter = load_adapter(adapter_name)
    mha = _subject(adapter, "mha[sdpa]")
    handle = adapter.build(mha, DEFAULT_CONFIG, seed=0)
    rng = np.random.default_rng(0)
    query, key = (rng.standard_normal((1, 3, DEFAULT_CONFIG.d_model)) for _ in range(2))
    with pytest.raises(Unsupported, match="self-attention"):
        adapter.run(handle, {"query": query, "key": key, "value": key})
    layer = _subject(adapter, "encoder_layer[sdpa]")
    for config, why in (
        (Config(d_model=24, n_heads=4, d_k=8, d_v=6), "d_k=8, d_v=6"),
        (Config(bias=False), "bias"),
    ):
        with pytest.raises(Unsupported, match=why):
            adapter.build(layer, config, seed=0)


@needs_transformers
@pytest.mark.spec("0.5")
@pytest.mark.parametrize("subject_name", ["mha[sdpa]", "encoder_layer[sdpa]", "encoder[sdpa]"])
def test_vit_qkv_bias_off_keeps_the_output_bias(subject_name: str) -> None:
    """ViTConfig(qkv_bias=False): q, k, v without bias, the output projection with one
    (Config.attention_bias=False, attention_out_bias=True): the layout loads name for name and
    the output is the oracle's (float64, sdpa: rounding only, ~1e-15 here; a dropped or
    added bias moves it by ~0.1)."""
    import dataclasses

    from tck.reference import init_params
    from tck.reference.expected import expected
    from tck.reference.inputs import Shape, make_inputs

    adapter = load_adapter("hf.vit")
    subject = _subject(adapter, subject_name)
    config = dataclasses.replace(DEFAULT_CONFIG, attention_bias=False, attention_out_bias=True)
    handle = adapter.build(subject, config, seed=0)
    params = init_params(subject.component, config, subject.conventions, seed=1)
    assert not any(k.endswith(("q.bias", "k.bias", "v.bias")) for k in params)
    assert any(k.endswith("o.bias") for k in params)
    adapter.load(handle, params)
    shape = Shape(lq=5, lk=5)  # ViTAttention is self-attention: one length
    inputs = make_inputs(subject.component, config, np.random.default_rng(2), shape)
    if subject.component == "mha":  # ViTAttention is self-attention
        inputs = {**inputs, "key": inputs["query"], "value": inputs["query"]}
    gold = expected(subject.component, inputs, params, config, subject.conventions)
    np.testing.assert_allclose(adapter.run(handle, inputs), gold, rtol=1e-9, atol=1e-9)
    without_out = dataclasses.replace(config, attention_out_bias=False)
    with pytest.raises(Unsupported, match="attention_out_bias"):
        adapter.build(subject, without_out, seed=0)


@needs_transformers
@pytest.mark.spec("0.5", "0.2")
def test_vit_checkpoint_with_qkv_bias_off_is_checked(tmp_path: Path) -> None:
    """A save_pretrained ViT with qkv_bias=False is read, not refused: its subjects fix
    attention_bias=False and attention_out_bias=True, hold exactly that canonical layout, and
    compute the oracle's output on the checkpoint's own weights (float64 sdpa: rounding only)."""
    from support.hf_checkpoints import save_vit

    from tck.adapters.pretrained import vit
    from tck.conformance.toolkit import spaces
    from tck.reference.expected import expected
    from tck.reference.inputs import Shape, make_inputs

    save_vit(
        tmp_path / "model",
        hidden_size=24,
        num_hidden_layers=1,
        num_attention_heads=3,
        intermediate_size=40,
        image_size=8,
        patch_size=4,
        num_labels=3,
        qkv_bias=False,
    )
    adapter = vit(tmp_path / "model")
    subject = _subject(adapter, "encoder_layer[sdpa]")
    ours = spaces.subject_config(subject, DEFAULT_CONFIG, {})
    assert (ours.has_attention_bias, ours.has_attention_out_bias) == (False, True)
    handle = adapter.build(subject, ours, seed=0)
    params = adapter.params(handle)
    assert "self_attn.o.bias" in params and "self_attn.q.bias" not in params
    inputs = make_inputs(subject.component, ours, np.random.default_rng(2), Shape(lq=5, lk=5))
    gold = expected(subject.component, inputs, params, ours, subject.conventions)
    np.testing.assert_allclose(adapter.run(handle, inputs), gold, rtol=1e-9, atol=1e-9)
