"""Decoder-only checkpoints as users save them: ``tck run --model DIR`` with no ``--adapter``
picks the family from config.json, reads every option that changes the maths from the file
(and says so), and refuses in one line, naming the key or tensor, what it cannot read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.forked_run import run_tck
from support.hf_checkpoints import save, save_bert

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.spec("0.2", "0.5", "2.3", "11.2", "11.5")


def _gpt2(folder: Path, **options) -> Path:
    torch.manual_seed(1)
    config = transformers.GPT2Config(
        n_embd=20,  # its own sizes, none of them the suite's defaults
        n_layer=2,
        n_head=5,
        n_inner=36,
        vocab_size=29,
        n_positions=24,
        layer_norm_epsilon=1e-4,
        activation_function="gelu_new",
        bos_token_id=None,
        eos_token_id=None,
        **options,
    )
    return save(transformers.GPT2LMHeadModel(config), folder)


def _llama(folder: Path, **options) -> Path:
    torch.manual_seed(2)
    settings = dict(
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention (SPEC.md §11.2)
        intermediate_size=40,
        vocab_size=31,
        max_position_embeddings=32,
        rms_norm_eps=1e-5,
        rope_theta=5e5,  # Llama 3's base, not the default 10000
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
    )
    config = transformers.LlamaConfig(**{**settings, **options})
    return save(transformers.LlamaForCausalLM(config), folder)


def _edit_config(folder: Path, **changes) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    path.write_text(json.dumps(config))


def _run(model: Path, out: Path, only: str) -> dict:
    done = run_tck(
        ["--model", str(model), "-n", "0", "--only", only, "--out", str(out)], out.parent
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads((out / "results.json").read_text())
    summary = document["summary"]
    assert summary["failed"] == 0 and summary["errors"] == 0, summary
    assert summary["unverified"] == 0 and summary["passed"] > 10, summary
    return document


def _strict_note(document: dict, subject: str) -> str:
    notes = document["adapter"]["notes"][subject]
    return next(n for n in notes if n.startswith("config.json, read strictly"))


def test_gpt2_checkpoint_without_adapter(tmp_path) -> None:
    model = _gpt2(tmp_path / "gpt2")
    document = _run(model, tmp_path / "out", "causal_lm,decoder_block")
    assert document["adapter"]["name"] == "hf.gpt2:gpt2"
    note = _strict_note(document, "causal_lm[sdpa]")
    for shown in ("n_embd=20", "n_head=5", "n_inner=36", "n_positions=24", "epsilon=0.0001"):
        assert shown in note, note
    assert "activation_function='gelu_new'" in note and "read from config.json" in note
    conventions = document["adapter"]["conventions"]["decoder_block[eager]"]
    assert conventions["eps"] == 1e-4 and conventions["activation"] == "gelu_tanh"
    passed = {(r["check"], r["subject"]) for r in document["results"] if r["status"] == "pass"}
    # the oracle compared every layer's own weights; the cache ran through every layer
    assert ("equality.oracle", "causal_lm[sdpa]") in passed
    assert ("decoder.kv_cache", "causal_lm[eager]") in passed
    oracle = next(
        r
        for r in document["results"]
        if (r["check"], r["subject"]) == ("equality.oracle", "causal_lm[eager]")
    )
    # one call at the checkpoint's own context (n_positions=24)
    assert max(c["seq_len"] or 0 for c in oracle["metrics"]["calls"]) == 24


def test_llama_checkpoint_theta_gqa_tied(tmp_path) -> None:
    """Llama with 4 query heads over 2 key/value heads, theta 5e5, tied embeddings: each read
    from the file. The same weights with another theta give another declared pe_base."""
    model = _llama(tmp_path / "llama")
    document = _run(model, tmp_path / "out", "causal_lm,causal_self_attention")
    assert document["adapter"]["name"] == "hf.llama:llama"
    note = _strict_note(document, "causal_lm[eager]")
    for shown in ("num_key_value_heads=2", "'rope_theta': 500000.0", "tie_word_embeddings=True"):
        assert shown in note, note
    assert document["adapter"]["conventions"]["causal_lm[eager]"]["pe_base"] == 5e5
    assert "n_kv_heads=2" in str(document["adapter"]["supports"]["causal_lm[eager]"])

    other = tmp_path / "llama_theta"
    shutil.copytree(model, other)
    _edit_config(other, rope_parameters={"rope_type": "default", "rope_theta": 20000.0})
    changed = _run(other, tmp_path / "out_theta", "causal_self_attention")
    subject = "causal_self_attention[eager]"
    before = document["adapter"]["conventions"][subject]
    after = changed["adapter"]["conventions"][subject]
    assert {k for k in before if before[k] != after[k]} == {"pe_base"}
    assert after["pe_base"] == 20000.0


def test_one_load_twin_implementations(tmp_path) -> None:
    """eager and sdpa subjects share the checkpoint's parameters: it is read once."""
    from tck.adapters import pretrained

    adapter = pretrained.auto(_llama(tmp_path / "llama"))
    eager, _ = adapter.views["causal_lm[eager]"]
    sdpa, _ = adapter.views["causal_lm[sdpa]"]
    assert eager is not sdpa
    assert eager.config._attn_implementation == "eager"
    assert sdpa.config._attn_implementation == "sdpa"
    pairs = zip(eager.parameters(), sdpa.parameters(), strict=True)
    assert all(a is b for a, b in pairs)


def test_library_default_is_shown_as_such(tmp_path) -> None:
    from tck.adapters import pretrained

    model = _llama(tmp_path / "llama")
    _edit_config(model, rms_norm_eps=None, max_position_embeddings=None)
    adapter = pretrained.auto(model)
    subject = next(s for s in adapter.subjects() if s.name == "decoder_block[eager]")
    note = next(n for n in subject.notes if n.startswith("config.json, read strictly"))
    assert "rms_norm_eps=1e-06 (eps of RMSNorm (SPEC.md §5.3)): transformers' default" in note
    assert "max_position_embeddings=2048" in note and "hidden_size=24" in note
    assert "hidden_size=24 (d_model): read from config.json" in note


def test_heads_not_checked_are_listed(tmp_path) -> None:
    torch.manual_seed(3)
    config = transformers.BertConfig(
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=20,
        vocab_size=30,
        max_position_embeddings=20,
        num_labels=3,
    )
    model = save(transformers.BertForSequenceClassification(config), tmp_path / "cls")
    document = _run(model, tmp_path / "out", "mha")
    note = _strict_note(document, "mha[eager]")
    assert "Not checked" in note and "classifier.weight" in note and "pooler.dense.weight" in note
    page = (tmp_path / "out" / "index.html").read_text()  # and in the HTML report
    assert "config.json, read strictly" in page and "classifier.weight" in page


def _bert(folder: Path) -> Path:
    return save_bert(folder, seed=4)


def _edit_tensors(folder: Path, add: dict | None = None, drop: str | None = None) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    tensors.update(add or {})
    tensors.pop(drop, None)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


DISTANCE = "encoder.layer.0.attention.self.distance_embedding.weight"


def _relative_key(folder: Path) -> None:
    """An older transformers' relative_key BERT: the option and its distance table."""
    _edit_config(folder, position_embedding_type="relative_key")
    _edit_tensors(folder, add={DISTANCE: torch.zeros(39, 4)})


REFUSALS = [
    ("bert", _relative_key, "position_embedding_type='relative_key'"),
    ("bert", lambda f: _edit_config(f, num_attention_heads=None), "lacks num_attention_heads"),
    ("bert", lambda f: _edit_config(f, hidden_size=None), "lacks hidden_size"),
    ("bert", lambda f: _edit_tensors(f, add={DISTANCE: torch.zeros(39, 4)}), DISTANCE),
    (
        "bert",
        lambda f: _edit_tensors(f, drop="encoder.layer.0.output.dense.weight"),
        "needs tensors encoder.layer.0.output.dense.weight",
    ),
    ("bert", lambda f: _edit_config(f, model_type="gemma"), "model_type='gemma'"),
    ("bert", lambda f: _edit_config(f, model_type="nobody_knows"), "gpt2 (hf.gpt2)"),
    ("bert", lambda f: _edit_config(f, some_new_switch=True), "some_new_switch=True"),
    ("gpt2", lambda f: _edit_config(f, scale_attn_by_inverse_layer_idx=True), "inverse_layer"),
    ("gpt2", lambda f: _edit_config(f, activation_function="swish"), "'swish'"),
    ("llama", lambda f: _edit_config(f, num_hidden_layers=None), "lacks num_hidden_layers"),
    (
        "llama",
        lambda f: _edit_config(f, rope_parameters={"rope_type": "dynamic", "factor": 2.0}),
        "rope_type='dynamic'",
    ),
]


@pytest.mark.parametrize(
    "family,edit,words", REFUSALS, ids=[f"{r[0]}-{r[2][:30]}" for r in REFUSALS]
)
def test_refused_in_one_line(tmp_path, capsys, family, edit, words) -> None:
    """In process (``tck.cli.main``, as the ``tck`` command calls it): every refusal comes
    before a check runs, and a process per case would cost seconds of imports each."""
    from tck.cli import main

    make = {"bert": _bert, "gpt2": _gpt2, "llama": _llama}[family]
    model = make(tmp_path / "model")
    edit(model)
    capsys.readouterr()
    code = main(["run", "--model", str(model), "-n", "0", "--out", str(tmp_path / "out")])
    stderr = capsys.readouterr().err
    assert code == 2, stderr
    assert words in stderr and "Traceback" not in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


def test_adapter_that_contradicts_the_file(tmp_path) -> None:
    model = _gpt2(tmp_path / "gpt2")
    done = run_tck(["--adapter", "hf.llama", "--model", str(model), "-n", "0"], tmp_path)
    assert done.returncode == 2 and "model_type 'gpt2' (hf.gpt2), not 'llama'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def _mistral(folder: Path, window: int = 6) -> Path:
    torch.manual_seed(5)
    config = transformers.MistralConfig(
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=40,
        vocab_size=31,
        max_position_embeddings=32,
        sliding_window=window,  # SPEC.md §4.5: the last 6 keys of each query
        bos_token_id=None,
        eos_token_id=None,
    )
    return save(transformers.MistralForCausalLM(config), folder)


def test_mistral_window_read_and_named(tmp_path) -> None:
    """The window is read from the file and checked at lengths past it (the checkpoint's own
    32 positions); the same weights with another window declare and show another one."""
    model = _mistral(tmp_path / "mistral")
    document = _run(model, tmp_path / "out", "causal_self_attention")
    assert document["adapter"]["name"] == "hf.mistral:mistral"
    subject = "causal_self_attention[eager]"
    assert "sliding_window=6" in _strict_note(document, subject)
    # the checkpoint's own 32 positions: equality.oracle's full-length call where the subject
    # runs in float64 (decoder.oracle_lengths makes it where it does not)
    oracle = next(
        r for r in document["results"] if (r["check"], r["subject"]) == ("equality.oracle", subject)
    )
    assert oracle["status"] == "pass"
    assert oracle["metrics"]["full_length"] == 32

    other = tmp_path / "mistral_window"
    shutil.copytree(model, other)
    _edit_config(other, sliding_window=11)
    changed = _run(other, tmp_path / "out_window", "causal_self_attention")
    before = document["adapter"]["conventions"][subject]
    after = changed["adapter"]["conventions"][subject]
    assert {k for k in before if before[k] != after[k]} == {"sliding_window"}
    assert after["sliding_window"] == 11


def test_qwen2_bias_on_qkv_not_o(tmp_path) -> None:
    torch.manual_seed(6)
    config = transformers.Qwen2Config(
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=40,
        vocab_size=31,
        max_position_embeddings=24,
        rope_theta=1e6,
        bos_token_id=None,
        eos_token_id=None,
    )
    model = save(transformers.Qwen2ForCausalLM(config), tmp_path / "qwen2")
    document = _run(model, tmp_path / "out", "causal_self_attention")
    subject = "causal_self_attention[sdpa]"
    assert document["adapter"]["name"] == "hf.qwen2:qwen2"
    supports = str(document["adapter"]["supports"][subject])
    assert "attention with bias" in supports
    assert "attention output projection without bias" in supports
    assert document["adapter"]["conventions"][subject]["pe_base"] == 1e6
    # the canonical parameters read off the checkpoint: q, k, v biases, none on o
    from tck.adapters import pretrained
    from tck.conformance.toolkit.harness import DEFAULT_CONFIG
    from tck.conformance.toolkit.spaces import subject_config

    adapter = pretrained.auto(model)
    subject_ = next(s for s in adapter.subjects() if s.name == subject)
    config = subject_config(subject_, DEFAULT_CONFIG, {})  # as every check resolves it
    handle = adapter.build(subject_, config, seed=0, dtype="float32")
    names = set(adapter.params(handle))
    assert {"q.bias", "k.bias", "v.bias"} <= names and "o.bias" not in names, names


def test_llama3_rope_scaling_read_and_named(tmp_path) -> None:
    """Llama 3's RoPE frequency scaling (SPEC.md §2.6) with its four numbers, read from the
    file and checked at the checkpoint's context (32 positions, past the original 8); the
    same weights unscaled declare rope_scaling='none'."""
    scaled = {
        "rope_type": "llama3",
        "rope_theta": 5e5,
        "factor": 4.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8,
    }
    model = _llama(tmp_path / "llama3", rope_parameters=scaled, rope_theta=None)
    document = _run(model, tmp_path / "out", "causal_self_attention")
    subject = "causal_self_attention[sdpa]"
    declared = document["adapter"]["conventions"][subject]
    assert declared["rope_scaling"] == "llama3" and declared["rope_scaling_factor"] == 4.0
    assert declared["rope_original_max_positions"] == 8 and declared["pe_base"] == 5e5
    assert "'rope_type': 'llama3'" in _strict_note(document, subject)

    other = tmp_path / "unscaled"
    shutil.copytree(model, other)
    _edit_config(other, rope_parameters={"rope_type": "default", "rope_theta": 5e5})
    changed = _run(other, tmp_path / "out_unscaled", "causal_self_attention")
    assert changed["adapter"]["conventions"][subject]["rope_scaling"] == "none"
