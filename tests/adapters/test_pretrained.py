"""The instance as it is: ``tck run --adapter hf.bert|hf.vit --model DIR`` on a
save_pretrained folder checks that checkpoint at its own sizes with its own weights, and
never writes them."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from support.hf_checkpoints import save_bert, save_vit

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.spec("0.2", "0.5", "10.3")


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _tck(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tck", "run", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


# the checkpoints' own sizes, not the suite's default d_model (24); BERT's tanh GELU is read
# from the config as a convention
BERT = partial(
    save_bert,
    vocab_size=50,
    hidden_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=80,
    max_position_embeddings=64,
    hidden_act="gelu_new",
)
VIT = partial(
    save_vit,
    hidden_size=40,
    num_hidden_layers=3,
    num_attention_heads=5,
    intermediate_size=72,
    image_size=12,
    patch_size=4,
    num_channels=3,
    num_labels=4,
    layer_norm_eps=1e-6,
)


@pytest.mark.parametrize(
    "adapter,save,d_model,expected_counts",
    [
        # embedding 50*48; encoder_layer 4*(48*48+48) + 2*48*80 + 80 + 48 + 2*2*48 (ViT: D=40, F=72)
        ("hf.bert", BERT, 48, {"embedding": 2400, "encoder_layer[sdpa]": 17408}),
        ("hf.vit", VIT, 40, {"encoder_layer[sdpa]": 12592}),
    ],
)
def test_checkpoint_as_it_is(tmp_path, adapter, save, d_model, expected_counts) -> None:
    model = tmp_path / "model"
    save(model)
    before = _digest(model)
    out = tmp_path / "out"
    done = _tck(
        ["--adapter", adapter, "--model", str(model), "-n", "0", "--out", str(out)], tmp_path
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _digest(model) == before  # read, never written
    document = json.loads((out / "results.json").read_text())
    summary = document["summary"]
    assert summary["failed"] == 0 and summary["errors"] == 0, summary
    assert summary["unverified"] == 0 and summary["passed"] > 50, summary
    # the checkpoint's own sizes: in the subjects' notes and in the parameter counts
    notes = [n for ns in document["adapter"]["notes"].values() for n in ns]
    assert any(f"d_model={d_model}" in n for n in notes), notes
    counts = {
        r["subject"]: r["metrics"]["param_count"]
        for r in document["results"]
        if r["check"] == "params.count" and r["status"] == "pass"
    }
    assert {k: counts.get(k) for k in expected_counts} == expected_counts, counts
    # the oracle compared the checkpoint's weights, at its size (the encoder stack included)
    passed = {(r["check"], r["subject"]) for r in document["results"] if r["status"] == "pass"}
    assert ("equality.oracle", "encoder[sdpa]") in passed
    oracle = next(
        r
        for r in document["results"]
        if (r["check"], r["subject"]) == ("equality.oracle", "encoder[sdpa]")
    )
    assert max(c["seq_len"] or 0 for c in oracle["metrics"]["calls"]) > 1
    # checks that need other parameters skip and say why
    reasons = [r["diagnosis"]["message"] for r in document["results"] if r["status"] == "skip"]
    assert any("own weights" in m or "the subject fixes" in m for m in reasons), reasons[:5]


def test_model_usage_errors(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text("{}")
    (pickled / "pytorch_model.bin").write_bytes(b"not read")
    for args, words in (
        (["--adapter", "reference", "--model", str(tmp_path)], "--model works with"),
        (["--adapter", "hf.bert", "--model", str(tmp_path / "nope")], "save_pretrained folder"),
        (["--adapter", "hf.bert", "--model", str(tmp_path / "empty")], "save_pretrained folder"),
        (["--adapter", "hf.bert", "--model", str(pickled)], "never loads pickles"),
        (["--attention", "sdpa"], "--attention applies to --model"),
        (["--model", str(tmp_path / "empty"), "--attention", "flash"], "name eager and/or sdpa"),
    ):
        done = _tck(args, tmp_path)
        assert done.returncode == 2, done.stderr
        assert words in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_attention_implementations_checked(tmp_path, monkeypatch) -> None:
    """Both of transformers' attention implementations below real size; at real size the
    default one alone, the other named as not checked; --attention ($TCK_ATTENTION) says
    otherwise, and a name it cannot check is refused in one line."""
    from tck.adapters.checkpoint_config import ModelError
    from tck.adapters.pretrained import ATTENTION_ENV, attention_choice

    offered = ("eager", "sdpa")
    small, base = {"d_model": 32, "d_ff": 64}, {"d_model": 768, "d_ff": 3072}
    monkeypatch.delenv(ATTENTION_ENV, raising=False)
    assert attention_choice(offered, small) == (
        offered,
        "Attention implementations checked: eager, sdpa.",
    )
    chosen, note = attention_choice(offered, base)
    assert chosen == ("sdpa",), note
    assert "not checked: eager" in note and "--attention eager,sdpa" in note, note
    monkeypatch.setenv(ATTENTION_ENV, "eager,sdpa")
    assert attention_choice(offered, base)[0] == offered
    monkeypatch.setenv(ATTENTION_ENV, "eager")
    chosen, note = attention_choice(offered, small)
    assert chosen == ("eager",) and "not checked: sdpa" in note, note
    monkeypatch.setenv(ATTENTION_ENV, "flash_attention_2")
    with pytest.raises(ModelError, match="choose from eager, sdpa"):
        attention_choice(offered, small)
    # end to end: the subjects of the implementation asked for, and the note that says so
    folder = save_bert(
        tmp_path / "bert",
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=1,
        intermediate_size=64,
        max_position_embeddings=16,
    )
    monkeypatch.delenv(ATTENTION_ENV)
    out = tmp_path / "out"
    args = ["--model", str(folder), "--attention", "eager", "--only", "mha", "--out", str(out)]
    done = _tck(args, tmp_path)
    assert done.returncode == 0, done.stderr
    text = (out / "results.json").read_text()
    assert {r["subject"] for r in json.loads(text)["results"]} == {"mha[eager]"}
    assert "checked: eager (as --attention asks); not checked: sdpa." in text
